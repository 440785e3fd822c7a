"""transformers' MusicGen generation as the reference of the text-to-music checks (torch needed)."""

from __future__ import annotations

import numpy as np


def transformers_music(model, feeds: dict, **settings) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, audio)`` of ``model.generate(do_sample=False, **settings)`` on tokenised ``feeds``.

    ``generate`` returns only the audio: the codes (delay pattern undone) are caught on
    their way into EnCodec's ``decode``; a stereo model decodes the left codebooks'
    half, then the right's, and they are interleaved back as the decoder wrote them.
    """
    import torch

    caught = []
    decode = model.audio_encoder.decode

    def catch(codes, *args, **kwargs):
        caught.append(codes[0].numpy())
        return decode(codes, *args, **kwargs)

    model.audio_encoder.decode = catch
    try:
        with torch.no_grad():
            audio = model.generate(
                input_ids=torch.from_numpy(feeds["input_ids"]),
                attention_mask=torch.from_numpy(feeds["attention_mask"]),
                do_sample=False,
                **settings,
            )
    finally:
        del model.audio_encoder.decode
    codes = caught[0]
    if len(caught) == 2:
        left, right = caught
        codes = np.stack([left, right], axis=2).reshape(left.shape[0], -1, left.shape[-1])
    return codes, audio.numpy()

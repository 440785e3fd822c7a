"""The heads of wav2vec2-family audio encoders: what a checkpoint names, what a package holds.

A checkpoint's ``config.json`` ``architectures`` names its head by the class suffix
(``Wav2Vec2ForCTC``, ``WavLMForXVector``...); the build reads it
(:class:`mobius_audio.models.wav2vec2.Wav2Vec2Config`), the runners and ``--validate``
read a built package's head from its graph outputs, and its ``config.json`` only to
tell frame logits from CTC logits (both ``[batch, frames, n]``). No heavy imports:
the runners load this.
"""

from __future__ import annotations

#: ``architectures`` suffix -> head, in the order a checkpoint naming several is read.
HEAD_SUFFIXES = {
    "ForCTC": "ctc",
    "ForSequenceClassification": "sequence-classification",
    "ForAudioClassification": "sequence-classification",  # AST's utterance classifier
    "ForAudioFrameClassification": "audio-frame-classification",
    "ForXVector": "xvector",
}


def head_of(architectures) -> str:
    """The head ``architectures`` (a config's list of class names) names; ``"none"`` for a bare model."""
    names = [a for a in architectures or [] if isinstance(a, str)]
    for suffix, head in HEAD_SUFFIXES.items():
        if any(name.endswith(suffix) for name in names):
            return head
    return "none"


def graph_head(output_ranks: dict[str, int], architectures) -> str:
    """A built package's head from its graph's outputs (name -> rank) and ``architectures``.

    ``embeddings`` is the x-vector's; ``logits`` of rank 2 are utterance logits; rank 3
    are a frame classifier's when the checkpoint named one, else CTC's.
    """
    if "embeddings" in output_ranks:
        return "xvector"
    rank = output_ranks.get("logits")
    if rank is None:
        return "none"
    if rank == 2:
        return "sequence-classification"
    framewise = head_of(architectures) == "audio-frame-classification"
    return "audio-frame-classification" if framewise else "ctc"

"""SeamlessM4T v2 speech output: v1's runner (:mod:`mobius_audio.seamless_speech_generate`) with v2's units.

transformers' ``SeamlessM4Tv2ForTextToSpeech.generate(input_ids, tgt_lang=...)``
(and ``...ForSpeechToSpeech``'s) differs from v1's after the text, and so does
this runner's :meth:`CharacterUnits.speech_units`:

1. the text decoder's states are over the translated sequence less its last
   token (``</s> __fra__ ...``, the end token trimmed), masked where it is
   ``pad_token_id``;
2. the text tokens (the sequence after the prompt; the end token as
   ``pad_token_id``) are spelled out with the generation config's
   ``id_to_text`` (token id -> piece) and ``char_to_id`` (character -> id; an
   unknown one is ``UNK_TOKEN_ID``), and each counted as transformers counts it
   (a punctuation piece before a word takes that word's space); the prompt and
   the end position count no character;
3. the unit encoder over the states, then the non-autoregressive unit decoder over
   them, the characters and the counts: the argmax of each frame's logits are the
   units, the end unit and every frame past the row's end become
   ``t2u_pad_token_id``; then v1's vocoder.

Every value read from the package's configs is checked before use.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import MobiusError
from mobius.generate import PackageError
from mobius_audio.seamless_speech_generate import SeamlessM4TSpeechToSpeech, SeamlessM4TTextToSpeech

#: transformers' unknown-token id in its character helpers (not read from any config).
UNK_TOKEN_ID = 1
SPACE = "▁"  # SentencePiece's word start


def character_counts(ids: list[int], pieces: list[str], pad: int) -> list[int]:
    """Each token's character count, as transformers' ``_count_character_length_in_subword``
    counts it (spaces merged with the next piece; a punctuation piece followed by a word
    takes its space); counting stops at the first ``pad``."""
    counts = [0] * len(ids)
    real = sum(token != pad for token in ids)
    ids, pieces = ids[:real], pieces[:real]
    before_word = [
        i + 1 < len(pieces) and len(pieces[i + 1]) > 1 and pieces[i + 1][0] == SPACE
        for i in range(len(pieces))
    ]
    punctuation = [
        len(p) == 1 and not p.isalpha() and not p.isnumeric() and p != SPACE for p in pieces
    ]
    for i, (token, piece) in enumerate(zip(ids, pieces, strict=True)):
        if token == pad:
            break
        if token == UNK_TOKEN_ID:
            counts[i] = 1
            continue
        count = len(piece)
        if punctuation[i] and before_word[i]:
            count += 1
        elif i > 0 and punctuation[i - 1] and before_word[i - 1]:
            count -= 1
        counts[i] = count
    return counts


def character_ids(
    ids: list[int], pieces: list[str], length: int, pad: int, char_to_id: dict
) -> np.ndarray:
    """The pieces' character ids one after the other, ``length`` long, padded with ``pad``
    (transformers' ``_get_char_input_ids``)."""
    row = np.full(length, pad, np.int64)
    real = sum(token != pad for token in ids)
    total = 0
    for token, piece in zip(ids[:real], pieces[:real], strict=True):
        chars = (
            [UNK_TOKEN_ID]
            if token == UNK_TOKEN_ID
            else [char_to_id.get(c, UNK_TOKEN_ID) for c in piece]
        )
        row[total : total + len(chars)] = chars
        total += len(chars)
    return row


class CharacterUnits:
    """v1's speaking runner with v2's unit model (a mixin before it); see the module docstring."""

    contract = "SeamlessM4T v2 speech-output"
    _char_to_id: dict | None = None

    def _check_contract(self) -> None:
        super()._check_contract()
        inputs = {i.name for i in self.t2u_decoder.get_inputs()}
        missing = {"encoder_hidden_states", "char_input_ids", "char_count_per_id"} - inputs
        if missing:
            raise PackageError(
                f"{self.package_dir}: t2u_decoder lacks {', '.join(sorted(missing))}: not a "
                f"{self.contract} package built by mobius"
            )

    def _table(self, key: str) -> dict:
        table = self.generation_config.get(key)
        if not isinstance(table, dict):
            raise PackageError(
                f"generation_config.json in {self.package_dir} has no {key} map (v2's unit "
                "model reads the text's characters)"
            )
        return table

    def char_to_id(self) -> dict:
        """The generation config's ``char_to_id``, every id checked below ``char_vocab_size``."""
        if self._char_to_id is None:
            table = self._table("char_to_id")
            limit = self._int_setting("char_vocab_size", 1)
            for char, value in table.items():
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < limit:
                    raise PackageError(f"char_to_id[{char!r}]={value!r} is not an id below {limit}")
            self._char_to_id = table
        return self._char_to_id

    def unit_logits(self, sequence: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The unit decoder's ``(logits [frames, units], padding_mask [frames])`` of the translated
        ``sequence`` (what :meth:`translated_sequence` gives)."""
        pad, eos = self._int_setting("pad_token_id"), self._int_setting("eos_token_id")
        sequence = sequence[:-1]  # transformers trims the last token, the end token or not
        text = [pad if token == eos else token for token in sequence[2:]]
        if pad in text[: sum(token != pad for token in text)]:
            raise MobiusError(
                f"the translation holds the padding token ({pad}) before its end: transformers "
                "spells such a text with more characters than it counts, and fails"
            )
        id_to_text = self._table("id_to_text")
        pieces = [str(id_to_text.get(str(token))) for token in text]
        counts = [0, *character_counts(text, pieces, pad), 0]
        if not sum(counts):
            raise MobiusError("the translation has no characters: there is nothing to speak")
        chars = character_ids(text, pieces, sum(counts), pad, self.char_to_id())
        mask = self.unit_source_mask(sequence)
        (states,) = self.t2u_encoder.run(
            ["last_hidden_state"],
            {"inputs_embeds": self.text_states(sequence), "attention_mask": mask},
        )
        logits, padding = self.t2u_decoder.run(
            ["logits", "padding_mask"],
            {
                "encoder_hidden_states": states,
                "char_input_ids": chars[None],
                "char_count_per_id": np.asarray([counts], np.int64),
            },
        )
        return logits[0], padding[0]

    def speech_units(self, tokens: list[int], unit_language: int) -> list[int]:
        """The units, all at once (``unit_language`` is v1's prompt: v2 reads none)."""
        logits, padding = self.unit_logits(self.translated_sequence(tokens))
        eos, pad = self._int_setting("t2u_eos_token_id"), self._int_setting("t2u_pad_token_id")
        units = logits.argmax(-1).tolist()
        return [pad if u == eos or not keep else u for u, keep in zip(units, padding, strict=True)]


class SeamlessM4Tv2TextToSpeech(CharacterUnits, SeamlessM4TTextToSpeech):
    """Text in: ``translate(text) -> (text, waveform, rate)``."""


class SeamlessM4Tv2SpeechToSpeech(CharacterUnits, SeamlessM4TSpeechToSpeech):
    """Audio in: ``translate(path) -> (text, waveform, rate)``."""

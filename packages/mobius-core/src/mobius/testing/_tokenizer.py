"""A tiny word-level tokenizer for tests: prompts as ``w3 w7 ...`` over any vocabulary size."""

from __future__ import annotations


def tiny_tokenizer(
    vocab_size: int, special_tokens: dict[str, int], named_tokens: dict[str, str] | None = None
):
    """A word-level fast tokenizer: ``w0 .. w{n}`` plus ``special_tokens`` at their ids.

    ``<unk>`` and ``<pad>`` take the first two free ids; padding is on the left, as
    generation pads. ``named_tokens`` gives special tokens the attribute names a
    processor reads (``{"boi_token": "<start_of_image>"}``: ``tokenizer.boi_token`` and
    ``tokenizer.boi_token_id``).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    taken = set(special_tokens.values())
    free = [i for i in range(vocab_size) if i not in taken]
    vocab = {f"w{i}": i for i in free[2:]}
    specials = {"<unk>": free[0], "<pad>": free[1], **special_tokens}
    vocab.update(specials)
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        pad_token="<pad>",
        padding_side="left",
        extra_special_tokens=dict(named_tokens or {}),
    )
    fast.add_special_tokens({"additional_special_tokens": list(special_tokens)})
    return fast

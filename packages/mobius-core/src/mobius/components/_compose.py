"""Putting encoder features into a text decoder: the placeholder merge and embeddings handed in.

A multimodal model (vision–language, audio–language) reuses a text decoder exactly as
mobius-text builds it. The decoder embeds its own ``input_ids``; a multimodal model
instead hands it the merged embeddings, through :func:`embeddings_given`, which turns
the decoder's token lookup into a pass-through for the duration of one call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from onnxscript import nn

from mobius.components._scope import module_scope


def merge_image_features(op, inputs_embeds, input_ids, image_features, image_token_id: int):
    """``inputs_embeds`` with the rows at ``image_token_id`` replaced by ``image_features`` in order.

    ``inputs_embeds`` [batch, sequence, hidden], ``image_features`` [image_tokens, hidden]:
    the placeholders are filled row-major (batch, then position), as transformers'
    ``masked_scatter`` does. With no features (a decode step) nothing changes; a count
    of placeholders that differs from a non-empty ``image_features`` is a runtime error.
    """
    is_image = op.Equal(input_ids, op.Constant(value_int=image_token_id))  # [batch, sequence]
    # No features (no image given): placeholder ids embed as plain tokens, as transformers
    # does without pixel_values.
    rows = op.Shape(image_features, start=0, end=1)
    has_features = op.Squeeze(op.Greater(rows, op.Constant(value_ints=[0])), [0])
    is_image = op.And(is_image, has_features)
    positions = op.Transpose(op.NonZero(is_image), perm=[1, 0])  # [image_tokens, 2]
    return op.ScatterND(inputs_embeds, positions, image_features)


def module_path(root: nn.Module, path: str) -> list[nn.Module]:
    """The submodules along the dotted ``path`` from ``root`` (``"model.embed_tokens"``), in order."""
    modules, module = [], root
    for name in path.split("."):
        module = getattr(module, name)
        modules.append(module)
    return modules


@contextlib.contextmanager
def embeddings_given(
    op, decoder: nn.Module, embedding_path: str = "model.embed_tokens"
) -> Iterator:
    """Within the block, ``decoder``'s token embedding returns its input unchanged.

    The decoder is then called with ``inputs_embeds`` where it takes ``input_ids``
    (its sequence length reads the same from either). The embedding's weight is
    named first, under its own path, so a tied output head still shares it by its
    checkpoint name.
    """
    chain = module_path(decoder, embedding_path)
    embedding = chain[-1]
    with module_scope(op, decoder, *chain):
        pass
    object.__setattr__(embedding, "forward", lambda op, inputs_embeds: op.Identity(inputs_embeds))
    try:
        yield
    finally:
        object.__delattr__(embedding, "forward")

"""The contract of a model's top-level module: what core may call on it, with the defaults.

Every class a domain package registers subclasses :class:`Model` (directly or
through its family's base). Core calls only what is declared here, and the
task the class names calls the hooks of its contract (listed below), so
nothing is discovered by ``getattr``.

Weights: the checkpoint's tensors are matched to the module tree's parameters
by name, which the submodules' names make the identity. The true exceptions are
one method and one set: :meth:`Model.sanitize` (renames, splits, merges, drops,
tying) and :attr:`Model.ignored` (checkpoint tensors known to be unused, as
glob patterns). Anything else left over, or missing, fails the build by name.

Hooks of core's task contracts:

- ``causal-lm``: ``__call__(op, input_ids, attention_mask, position_ids, past)``
  and :meth:`Model.cache_layout` (or the shorter ``kv_cache_shapes()``);
- ``feature-extraction``: ``__call__(op, input_ids, attention_mask, token_type_ids)``,
  :attr:`Model.uses_token_type_ids`, :meth:`Model.output_shapes`, and
  :meth:`Model.extra_inputs` (inputs beyond the contract's, such as LayoutLM's ``bbox``,
  passed as keyword arguments) with :attr:`Model.zeros_when_absent`;
- ``seq2seq``: ``encode``, ``decode`` and ``cache_shapes`` (see
  :mod:`mobius.tasks._seq2seq`).

Domain tasks document their own hooks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import onnx_ir as ir
from onnxscript import nn


class Model(nn.Module):
    """Base of every registered model class; see the module docstring."""

    #: The task (I/O contract) the class builds by default.
    task: ClassVar[str] = "causal-lm"
    #: The normalised config class (``from_hf``) of the family.
    config_class: ClassVar[type]
    #: Checkpoint tensors the module tree does not read, as glob patterns
    #: (rotary caches, heads the task does not build). A subclass extends its base's.
    ignored: tuple[str, ...] = ()
    #: Feature extraction: whether the graph takes ``token_type_ids``.
    uses_token_type_ids: ClassVar[bool] = False
    #: Feature extraction: the :meth:`extra_inputs` a runner may feed as zeros when it has
    #: none, because that is what transformers does when they are not given.
    zeros_when_absent: ClassVar[tuple[str, ...]] = ()

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """The checkpoint's tensors by name, as the module tree names them.

        ``weights`` maps names to lazy tensors; return a new mapping with the
        family's renames, splits and merges (as :class:`~mobius.weights.DerivedTensor`),
        drops and tying applied. The default is the identity.
        """
        return weights

    def cache_layout(self) -> list[list[tuple[str, list]]]:
        """Causal LM: per layer, the ``(kind, shape)`` of each cache tensor.

        The default serves attention-only models from ``kv_cache_shapes()``
        (per layer ``(kv_heads, key head_dim, value head_dim)``).
        """
        return [
            [
                ("key", ["batch", kv_heads, "past_sequence", key_dim]),
                ("value", ["batch", kv_heads, "past_sequence", value_dim]),
            ]
            for kv_heads, key_dim, value_dim in self.kv_cache_shapes()
        ]

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        """Causal LM, attention-only: per layer ``(kv_heads, key head_dim, value head_dim)``."""
        raise NotImplementedError(f"{type(self).__name__} declares no cache layout")

    def output_shapes(self) -> dict[str, list]:
        """Feature extraction: outputs the family adds beside the contract's, with their shapes."""
        return {}

    def extra_inputs(self) -> dict[str, tuple[ir.DataType | None, list]]:
        """Feature extraction: inputs beyond the contract's, name -> ``(dtype, shape)``.

        Shapes use the symbolic dims ``batch`` and ``sequence`` and ints (LayoutLM's
        ``bbox``: ``["batch", "sequence", 4]``); a dtype of None is the build's float type.
        The graph declares them after the contract's inputs and the task passes them to
        ``__call__`` by keyword (a domain task may take them too: Prompt Depth Anything's
        ``prompt_depth``).
        """
        return {}

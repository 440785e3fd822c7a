"""IP-Adapter attention in the UNet: each cross-attention also attends to image tokens.

diffusers' ``IPAdapterAttnProcessor2_0``: the text attention's output (before
``to_out``) plus ``scale`` times the attention of the same queries over the image
tokens through ``to_k_ip``/``to_v_ip`` (no bias, one pair per cross-attention).
The image tokens are the IP-Adapter's projection of a CLIP image embedding
(:mod:`mobius_diffusion.models.ip_adapter`, its own graph); the UNet takes them as
``ip_adapter_image_embeds`` and the scale as ``ip_adapter_scale``.

The key/value projections live in the adapter checkpoint as
``ip_adapter.{2k+1}.to_k_ip.weight`` / ``to_v_ip.weight`` for the k-th
cross-attention in the order diffusers lists its attention processors (down
blocks, up blocks, then the mid block; the odd ids are the original numbering, in
which each block's self-attention takes the even one). :func:`ip_adapter_weights`
renames them to the module paths; any other tensor of the file but the
``image_proj.*`` ones is passed on as it is named, and so fails the build by name.

FaceID checkpoints also hold a LoRA of every attention (``ip_adapter.{id}.to_{q,k,v,out}_lora
.{down,up}.weight``, the self-attention's at the even id) that diffusers' ``load_ip_adapter``
loads through peft at weight 1 with no alpha: merged here into the UNet's weights, ``W + up
@ down``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius_diffusion.models._attention import Attention

#: diffusers' UNet lists its attention processors in this order of top-level blocks.
_BLOCK_ORDER = ("down_blocks", "up_blocks", "mid_block")
_KEY = re.compile(r"ip_adapter\.(\d+)\.(to_k_ip|to_v_ip)\.weight")
_LORA = re.compile(r"ip_adapter\.(\d+)\.(to_q|to_k|to_v|to_out)_lora\.(down|up)\.weight")


class IPContext(NamedTuple):
    """What the cross-attentions of a UNet with IP-Adapter attention read: the text states,
    the image tokens ``[batch, image_tokens, cross_attention_dim]`` and the scalar scale."""

    text: object
    image: object
    scale: object


class IPAdapterAttention(Attention):
    """Cross-attention over the text plus ``scale`` x attention over the image tokens."""

    def __init__(self, query_dim: int, heads: int, dim_head: int, cross_attention_dim: int):
        super().__init__(query_dim, heads, dim_head, cross_attention_dim=cross_attention_dim)
        inner = heads * dim_head
        self.to_k_ip = Linear(cross_attention_dim, inner, bias=False)
        self.to_v_ip = Linear(cross_attention_dim, inner, bias=False)

    def forward(self, op, hidden, context: IPContext):
        q = self.to_q(op, hidden)
        text = self.attend(op, q, self.to_k(op, context.text), self.to_v(op, context.text))
        k, v = self.to_k_ip(op, context.image), self.to_v_ip(op, context.image)
        image = self.attend(op, q, k, v)  # [b, pixels, inner]
        return self.to_out[0](op, op.Add(text, op.Mul(image, op.CastLike(context.scale, image))))


def ip_attention_paths(module) -> list[str]:
    """The module paths of ``module``'s IP-Adapter attentions, in diffusers' processor order."""
    paths = [name for name, m in module.named_modules() if isinstance(m, IPAdapterAttention)]
    return sorted(paths, key=lambda p: _BLOCK_ORDER.index(p.split(".")[0]))  # stable


def ip_adapter_weights(module, path: str | Path, base: dict) -> dict:
    """The tensors of IP-Adapter file ``path`` the UNet reads, named as ``module`` names them,
    with FaceID's LoRA merged into the UNet's ``base`` weights.

    ``image_proj.*`` (the image projection, a graph of its own) is left out;
    ``ip_adapter.{2k+1}.to_{k,v}_ip.weight`` becomes the k-th IP attention's
    ``to_k_ip.weight``/``to_v_ip.weight``; a LoRA pair replaces the base weight it adapts
    (a lazy merge); anything else keeps its name, which the weight check then reports as
    unexpected.

    Raises:
        ConfigError: the file is not a safetensors file, or a LoRA tensor lacks its other
            half or does not fit the weight it adapts.
    """
    from mobius.weights import SafetensorsCheckpoint

    path = Path(path)
    if not path.is_file() or path.suffix != ".safetensors":
        raise ConfigError(f"--ip-adapter {path}: expected an IP-Adapter .safetensors file")
    checkpoint = SafetensorsCheckpoint.open(path)
    targets = ip_attention_paths(module)
    weights, lora = {}, {}
    for name, tensor in checkpoint.items():
        if name.startswith("image_proj."):
            continue
        adapted = _lora_target(targets, _LORA.fullmatch(name))
        if adapted is not None:
            lora.setdefault(adapted, {})[name.rsplit(".", 2)[-2]] = (name, tensor)
            continue
        match = _KEY.fullmatch(name)
        index = int(match.group(1)) if match else 0
        if match and index % 2 == 1 and index // 2 < len(targets):
            name = f"{targets[index // 2]}.{match.group(2)}.weight"
        weights[name] = tensor
    for target, halves in sorted(lora.items()):
        weights[target] = _merged(target, halves, base)
    return weights


def _lora_target(targets: list[str], match) -> str | None:
    """The UNet weight a LoRA key adapts (id 2k: the k-th IP attention's block's ``attn1``,
    2k+1: that ``attn2``), or None: not a LoRA key of one of them."""
    if match is None or int(match.group(1)) // 2 >= len(targets):
        return None
    index, proj = int(match.group(1)), match.group(2)
    attention = targets[index // 2]
    if index % 2 == 0:
        if not attention.endswith(".attn2"):
            return None
        attention = attention.removesuffix("2") + "1"
    return f"{attention}.{'to_out.0' if proj == 'to_out' else proj}.weight"


def _merged(target: str, halves: dict, base: dict):
    """``target`` with its LoRA pair merged, computed when the build writes it."""
    from mobius.weights import DerivedTensor

    if set(halves) != {"down", "up"}:
        (name, _), half = next(iter(halves.values())), {"down": "up", "up": "down"}
        raise ConfigError(f"--ip-adapter: {name} has no {half[name.rsplit('.', 2)[-2]]} half")
    (down_name, down), (_, up) = halves["down"], halves["up"]
    weight = base.get(target)
    if weight is None:
        raise ConfigError(f"--ip-adapter: {down_name} adapts {target}, which this UNet lacks")
    if (
        len(down.shape) != 2
        or len(up.shape) != 2
        or up.shape[1] != down.shape[0]
        or (up.shape[0], down.shape[1]) != tuple(weight.shape)
    ):
        raise ConfigError(
            f"--ip-adapter: {down_name} {list(down.shape)} and its up {list(up.shape)} do not "
            f"fit {target} {list(weight.shape)}"
        )

    def merge():
        w = np.asarray(weight.numpy())
        delta = np.asarray(up.numpy(), np.float32) @ np.asarray(down.numpy(), np.float32)
        return (w.astype(np.float32) + delta).astype(w.dtype)

    return DerivedTensor(merge, weight.shape, weight.dtype)


def check_ip_adapter(config) -> None:
    """Refuse IP-Adapter attention for a UNet layout diffusers' loader does not serve."""
    if any(kind.startswith("Simple") for kind in config.down_block_types + config.up_block_types):
        raise ConfigError("--ip-adapter: a UNet with simple cross-attention blocks is not built")
    if config.encoder_hid_dim_type is not None:
        raise ConfigError(
            f"--ip-adapter: a UNet with encoder_hid_dim_type {config.encoder_hid_dim_type!r} "
            "is not built"
        )
    if len(set(config.cross_attention_dim)) > 1:
        raise ConfigError(
            f"--ip-adapter: a UNet with cross_attention_dim per block "
            f"{config.cross_attention_dim} is not built (diffusers' loader takes one)"
        )

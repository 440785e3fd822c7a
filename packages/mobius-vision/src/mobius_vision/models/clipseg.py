"""CLIPSeg: a mask per text prompt, from CLIP's two towers and a small FiLM-conditioned decoder.

``CLIPSegForImageSegmentation`` (the ``text-prompted-segmentation`` contract,
:mod:`mobius_vision.tasks.text_prompted_segmentation`). The towers are CLIP's
(:mod:`mobius_vision.models.clip`) under the checkpoint's ``clip.*``; the prompt's
conditional embedding is the text tower's pooled state through ``text_projection`` (not
normalised). The vision tower runs at the image processor's size (352 px for the hub's
checkpoints, whose position table is for 224 px): its patch positions are resized bicubically
to that grid, as transformers' ``interpolate_pos_encoding`` (on by default for CLIPSeg)
does. The decoder reads the states after the ``extract_layers`` layers, deepest first: each is
reduced to ``reduce_dim`` and added to the running state, which is FiLM-modulated by the
prompt at ``conditional_layer`` and goes through one post-norm transformer layer per
extracted state; the patch tokens become a map that transposed convolutions upsample to
the input's size (``use_complex_transposed_convolution``: a 3x3 conv and two of them).

The image graph scores every image against every prompt: the vision tower runs once per
image, the decoder once per (image, prompt) pair.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from onnxscript import nn

from mobius.components import Linear, module_scope
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models.clip_text import CLIPEncoderLayer, CLIPTextTransformer
from mobius_vision.models._common import torch_bicubic_resize
from mobius_vision.models._conv import Activation, Conv2d, Sequential
from mobius_vision.models._dpt_neck import ConvTranspose2d
from mobius_vision.models.clip import CLIPConfig
from mobius_vision.models.clip_vision import CLIPVisionEmbeddings, CLIPVisionTransformer

#: The activation transformers' ``CLIPSegDecoder`` sets on its layers, whatever the config says.
DECODER_ACT = "relu"


def _int(hf_config, name: str, low: int) -> int:
    value = getattr(hf_config, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"clipseg: {name} {value!r} must be an integer >= {low}")
    return value


@dataclass
class CLIPSegConfig(CLIPConfig):
    """CLIP's tower configs and the decoder's; ``image_size`` is the graph's input size (the
    image processor's, set by the task), ``vision.image_size`` the position table's."""

    extract_layers: tuple[int, ...] = (3, 6, 9)
    reduce_dim: int = 64
    decoder_num_attention_heads: int = 4
    decoder_intermediate_size: int = 2048
    conditional_layer: int = 0
    complex_upsampler: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        architectures = tuple(getattr(hf_config, "architectures", None) or ())
        if architectures and not any(a.endswith("ForImageSegmentation") for a in architectures):
            raise ConfigError(
                f"{architectures[0]} (CLIPSeg's towers without the mask decoder) is not built; "
                "mobius builds clipseg as CLIPSegForImageSegmentation"
            )
        fields = super().hf_fields(hf_config)
        layers = fields["vision"].num_hidden_layers
        extract = getattr(hf_config, "extract_layers", None)
        if (
            not isinstance(extract, (list, tuple))
            or not extract
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in extract)
            or not all(0 <= i < layers for i in extract)
        ):
            raise ConfigError(
                f"clipseg: extract_layers {extract!r} must be vision layer indices in [0, {layers})"
            )
        conditional = _int(hf_config, "conditional_layer", 0)
        if conditional >= len(extract):  # transformers would never apply the prompt
            raise ConfigError(
                f"clipseg: conditional_layer {conditional} must be below the "
                f"{len(extract)} decoder layers, or the masks ignore the prompt"
            )
        reduce_dim = _int(hf_config, "reduce_dim", 1)
        heads = _int(hf_config, "decoder_num_attention_heads", 1)
        if reduce_dim % heads:
            raise ConfigError(
                f"clipseg: reduce_dim {reduce_dim} is not a multiple of "
                f"decoder_num_attention_heads {heads}"
            )
        complex_upsampler = getattr(hf_config, "use_complex_transposed_convolution", False)
        if complex_upsampler and fields["vision"].patch_size < 4:
            raise ConfigError("clipseg: the complex upsampler needs a patch_size of 4 or more")
        return dict(
            fields,
            extract_layers=tuple(extract),
            reduce_dim=reduce_dim,
            decoder_num_attention_heads=heads,
            decoder_intermediate_size=_int(hf_config, "decoder_intermediate_size", 1),
            conditional_layer=conditional,
            complex_upsampler=bool(complex_upsampler),
        )

    def with_image_size(self, size: tuple[int, int]) -> CLIPSegConfig:
        """The config for input images of ``size``: square, a whole number of patches (the
        decoder folds the patches into a square map, as transformers does)."""
        height, width = size
        patch = self.vision.patch_size
        if height != width or height % patch:
            raise ConfigError(
                f"clipseg: the image processor's size {height}x{width} must be square and a "
                f"multiple of the patch size {patch}"
            )
        return replace(self, image_size=(height, width))

    @property
    def grid(self) -> int:
        """The side of the input's patch grid."""
        return self.image_size[0] // self.vision.patch_size

    @property
    def mask_side(self) -> int:
        """The side of the logits: the grid upsampled by the transposed convolutions."""
        patch = self.vision.patch_size
        return self.grid * ((patch // 4) ** 2 if self.complex_upsampler else patch)


class CLIPSegVisionEmbeddings(CLIPVisionEmbeddings):
    """CLIP's embeddings with the patch positions resized to the input's grid."""

    def __init__(self, config, grid: int) -> None:
        super().__init__(config)
        self.table_side = config.image_size[0] // config.patch_size
        self.grid, self.hidden_size = grid, config.hidden_size

    def positions(self, op):
        """``[positions, hidden]``: the table as it is at its own grid, else its patch rows
        resized bicubically (``align_corners=False``) to the input's grid."""
        table = self.position_embedding(op)
        if self.grid == self.table_side:
            return table
        side, dim = self.table_side, self.hidden_size
        grid = op.Reshape(op.Slice(table, [1], [2**62], [0]), [1, side, side, dim])
        grid = op.Transpose(grid, perm=[0, 3, 1, 2])  # [1, hidden, side, side]
        grid = torch_bicubic_resize(
            op, grid, op.Constant(value_ints=[1, dim, self.grid, self.grid])
        )
        grid = op.Reshape(op.Transpose(grid, perm=[0, 2, 3, 1]), [-1, dim])
        return op.Concat(op.Slice(table, [0], [1], [0]), grid, axis=0)


class CLIPSegVisionTransformer(CLIPVisionTransformer):
    """CLIP's vision tower at the input's grid (:class:`CLIPSegVisionEmbeddings`)."""

    def __init__(self, config: CLIPSegConfig) -> None:
        super().__init__(config.vision)
        self.embeddings = CLIPSegVisionEmbeddings(config.vision, config.grid)


class CLIPSegTowers(nn.Module):
    """``clip``: the towers and the text projection the prompts go through (the decoder reads
    neither the pooled image nor ``logit_scale``)."""

    def __init__(self, config: CLIPSegConfig) -> None:
        super().__init__()
        self.text_model = CLIPTextTransformer(config.text)
        self.vision_model = CLIPSegVisionTransformer(config)
        self.text_projection = Linear(config.text.hidden_size, config.projection_dim, bias=False)


class CLIPSegDecoderLayer(CLIPEncoderLayer):
    """CLIP's layer normalised after each residual sum instead of before its branch."""

    def forward(self, op, x, bias):
        x = self.layer_norm1(op, op.Add(x, self.self_attn(op, x, bias)))
        return self.layer_norm2(op, op.Add(x, self.mlp(op, x)))


def upsampler(config: CLIPSegConfig) -> nn.Module:
    """``transposed_convolution``: one ``ConvTranspose2d`` (kernel = stride = patch), or, for
    ``use_complex_transposed_convolution``, the Sequential of a 3x3 conv and two transposed
    ones (kernel = stride = patch // 4), ReLUs between."""
    r, patch = config.reduce_dim, config.vision.patch_size
    if not config.complex_upsampler:
        return ConvTranspose2d(r, patch, out_channels=1)
    step = patch // 4
    return Sequential(
        [
            Conv2d(r, r, 3, padding=1),
            Activation("relu"),
            ConvTranspose2d(r, step, out_channels=r // 2),
            Activation("relu"),
            ConvTranspose2d(r // 2, step, out_channels=1),
        ]
    )


class CLIPSegDecoder(nn.Module):
    """``decoder``: FiLM, the reductions, the post-norm layers and the upsampler."""

    def __init__(self, config: CLIPSegConfig) -> None:
        super().__init__()
        r, depth = config.reduce_dim, len(config.extract_layers)
        self.config = config
        self.film_mul = Linear(config.projection_dim, r, bias=True)
        self.film_add = Linear(config.projection_dim, r, bias=True)
        self.reduces = nn.ModuleList(
            [Linear(config.vision.hidden_size, r, bias=True) for _ in range(depth)]
        )
        heads, width = config.decoder_num_attention_heads, config.decoder_intermediate_size
        eps = config.vision.layer_norm_eps
        self.layers = nn.ModuleList(
            [CLIPSegDecoderLayer(r, heads, width, DECODER_ACT, eps) for _ in range(depth)]
        )
        self.transposed_convolution = upsampler(config)

    def forward(self, op, activations, conditional_embeddings):
        """``logits [batch, prompts, side, side]`` from the extracted states (each ``[batch,
        tokens, hidden]``, shallowest first) and the prompts' ``[prompts, projection_dim]``."""
        c = self.config
        tokens, r = c.grid**2 + 1, c.reduce_dim
        batch = op.Shape(activations[0], start=0, end=1)
        per_image = op.Concat(batch, op.Constant(value_ints=[-1, tokens, r]), axis=0)
        rows = op.Constant(value_ints=[-1, tokens, r])  # [batch * prompts, tokens, r]
        state, filmed = None, False
        for i, (activation, layer, reduce) in enumerate(
            zip(reversed(activations), self.layers, self.reduces, strict=True)
        ):
            reduced = reduce(op, activation)  # [batch, tokens, r]
            if state is None:
                state = reduced
            elif filmed:  # one state per (image, prompt): the image's reduction added to each
                grouped = op.Reshape(state, per_image)  # [batch, prompts, tokens, r]
                state = op.Reshape(op.Add(grouped, op.Unsqueeze(reduced, [1])), rows)
            else:
                state = op.Add(state, reduced)
            if i == c.conditional_layer:
                state = op.Reshape(self.film(op, state, conditional_embeddings), rows)
                filmed = True
            state = layer(op, state, None)
        patches = op.Transpose(op.Slice(state, [1], [2**62], [1]), perm=[0, 2, 1])
        maps = op.Reshape(patches, op.Constant(value_ints=[-1, r, c.grid, c.grid]))
        logits = self.transposed_convolution(op, maps)  # [batch * prompts, 1, side, side]
        side = c.mask_side
        return op.Reshape(
            logits, op.Concat(batch, op.Constant(value_ints=[-1, side, side]), axis=0)
        )

    def film(self, op, state, conditional_embeddings):
        """``[batch, prompts, tokens, r]``: ``state * film_mul(prompt) + film_add(prompt)``."""
        scale = op.Unsqueeze(self.film_mul(op, conditional_embeddings), [0, 2])  # [1, p, 1, r]
        shift = op.Unsqueeze(self.film_add(op, conditional_embeddings), [0, 2])
        return op.Add(op.Mul(op.Unsqueeze(state, [1]), scale), shift)


class CLIPSegForImageSegmentation(Model):
    """``clip`` (the towers) and ``decoder``, as the checkpoint names them."""

    config_class = CLIPSegConfig
    task = "text-prompted-segmentation"

    def __init__(self, config: CLIPSegConfig) -> None:
        super().__init__()
        self.config = config
        self.clip = CLIPSegTowers(config)
        self.decoder = CLIPSegDecoder(config)

    def embed_prompts(self, op, input_ids, attention_mask):
        """``conditional_embeddings [prompts, projection_dim]``: the text tower's pooled state,
        projected (transformers' ``get_conditional_embeddings``)."""
        with module_scope(op, self.clip):
            _, pooled = self.clip.text_model(op, input_ids, attention_mask)
            return self.clip.text_projection(op, pooled)

    def segment(self, op, pixel_values, conditional_embeddings):
        """``logits [batch, prompts, side, side]``: every image against every prompt."""
        vision = self.clip.vision_model
        with module_scope(op, self.clip, vision):
            states = vision.hidden_states(op, pixel_values, max(self.config.extract_layers) + 1)
        activations = [states[i + 1] for i in self.config.extract_layers]
        return self.decoder(op, activations, conditional_embeddings)

    @property
    def ignored(self) -> tuple[str, ...]:
        """What the masks do not read: the pooled image and its projection, ``logit_scale``,
        the vision layers past the deepest extracted one, the position-id buffers."""
        unused_layers = range(
            max(self.config.extract_layers) + 1, self.config.vision.num_hidden_layers
        )
        return (
            "clip.logit_scale",
            "clip.visual_projection.*",
            "clip.vision_model.post_layernorm.*",
            "clip.*.embeddings.position_ids",
            *(f"clip.vision_model.encoder.layers.{i}.*" for i in unused_layers),
        )


MODEL_TYPES = {"clipseg": CLIPSegForImageSegmentation}

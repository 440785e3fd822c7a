"""Phi-4-multimodal: a SigLIP tower over HD crops, a conformer audio encoder, Phi-3's decoder.

``Phi4MultimodalForCausalLM`` (transformers 5) keeps one flat config: the top level
is the Phi-3 style decoder (fused ``qkv_proj`` and ``gate_up_proj``, partial LongRoPE),
built here by mobius-text's Phi-3 from that same config. Its image path
(``model.embed_tokens_extend.image_embed``) is:

- the tower (``img_processor``): Idefics3's (SigLIP layers, real patches' positions
  bucketized, padded patches masked as keys) over every crop of every image, each with
  its patch mask (``image_attention_mask``, float as onnxruntime-genai feeds it: 1.0 on
  a real patch); ``hidden_states[feature_layer]`` is read;
- each crop's patch grid averaged over 2x2 blocks (``base`` = half the patches a side);
- the HD transform, per image: the sub-crops laid out as their grid of
  ``base x base`` blocks, cut to the rows and columns the mask says are real, each row
  ended by ``sub_img_feature_extensor``; then ``global_img_feature_extensor``; then the
  global crop (crop 0) with its rows ended the same way;
- ``img_projection_up -> gelu -> img_projection_down``, into the image placeholders in order.

The graph does the HD transform with index arithmetic over the largest grid of the
batch (no loop over images): each image's candidate positions are listed in output
order, the real ones kept.

Its audio path (``model.embed_tokens_extend.audio_embed``, built as ``audio_tower``) is
:mod:`._phi4mm_audio`; the contract is :mod:`mobius_vision.tasks.audio_vision_language`,
and the audio graph takes what onnxruntime-genai's ``phi4mm`` speech section feeds:

- ``input_features`` float [num_audios, audio_frames, mel_bins]: the log-mels of each
  clip, padded at the end (the processor's ``audio_input_features``);
- ``feature_attention_mask`` bool [num_audios, audio_frames]: True on a real frame;
- ``audio_sizes`` int64 [num_audios]: the tokens each clip keeps (the processor's
  ``audio_embed_sizes``: ``ceil(frames / time_reduction)``);
- ``audio_projection_mode`` int64 [1]: odd when the prompt has an image (the
  vision-speech projections), even when not (the speech ones), as transformers
  chooses; mobius' processor gives 1 or 0, onnxruntime-genai's 3 or 2;

and writes ``audio_features`` [num_audio_tokens, hidden], into the audio placeholders
in order. The hub checkpoints that keep the vision and speech LoRA adapters apart
(``base_layer``, ``lora_A``...) are not the layout transformers' class loads; what is
built is what transformers builds from its own layout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, get_activation, module_scope
from mobius.errors import ConfigError
from mobius_text.models.phi3 import Phi3Config, Phi3ForCausalLM
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models import phi4_multimodal_genai
from mobius_vision.models._omni import HearingMixin
from mobius_vision.models._phi4mm_audio import (
    Phi4MultimodalAudioConfig,
    Phi4MultimodalAudioEmbedding,
)
from mobius_vision.models._vl import VisionLanguageModel, layer_index
from mobius_vision.models.idefics3_vision import Idefics3VisionConfig, Idefics3VisionTransformer

INT64 = ir.DataType.INT64


def _positive_int(hf_config: Any, name: str) -> int:
    value = getattr(hf_config, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(
            f"phi4_multimodal: {hf_config.model_type}.{name} {value!r} is not a positive int"
        )
    return value


@dataclass
class Phi4MultimodalConfig(VisionLanguageConfig):
    crop_size: int = 448
    feature_layer: int = -2
    audio: Phi4MultimodalAudioConfig | None = None
    audio_token_id: int = 0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        vision_hf = hf_config.vision_config
        vision = Idefics3VisionConfig.from_hf(vision_hf)
        if vision.patches_per_side % 2:
            raise ConfigError(
                f"phi4_multimodal: {vision.patches_per_side} patches a side; the 2x2 pooling "
                "of an odd grid (reflection padding) is not built"
            )
        crop = _positive_int(vision_hf, "crop_size")
        if crop != vision.image_size[0]:
            raise ConfigError(
                f"phi4_multimodal: crop_size {crop} differs from the tower's image_size "
                f"{vision.image_size[0]}"
            )
        layer = getattr(vision_hf, "feature_layer", -2)
        depth = vision.num_hidden_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not -depth <= layer <= depth:
            raise ConfigError(f"phi4_multimodal: vision_config.feature_layer {layer!r}")
        # The decoder's fields are the top-level config's (a Phi-3's).
        text = dataclasses.replace(Phi3Config.from_hf(hf_config), model_type="phi3")
        return dict(
            model_type=hf_config.model_type,
            vision=vision,
            text=text,
            image_token_id=_positive_int(vision_hf, "image_token_id"),
            crop_size=crop,
            feature_layer=layer,
            audio=Phi4MultimodalAudioConfig.from_hf(hf_config.audio_config),
            audio_token_id=_positive_int(hf_config.audio_config, "audio_token_id"),
        )

    def genai_processor_config(self, preprocessor: dict[str, Any]) -> dict[str, Any]:
        """onnxruntime-genai's image preprocessing (:mod:`.phi4_multimodal_genai`)."""
        return phi4_multimodal_genai.processor_config(self, preprocessor)

    def genai_audio_processor_config(self, preprocessor: dict[str, Any]) -> dict[str, Any]:
        """onnxruntime-genai's log-mel features (:mod:`.phi4_multimodal_genai`)."""
        return phi4_multimodal_genai.audio_processor_config(self, preprocessor)


class Phi4MultimodalImageProjector(nn.Module):
    """The parts of ``image_embed`` beside the tower: the HD separators and the projection."""

    def __init__(self, width: int, text_hidden: int) -> None:
        super().__init__()
        self.global_img_feature_extensor = nn.Parameter([1, 1, width])
        self.sub_img_feature_extensor = nn.Parameter([1, 1, 1, width])
        self.img_projection_up = Linear(width, text_hidden, bias=True)
        self.act = get_activation("gelu")
        self.img_projection_down = Linear(text_hidden, text_hidden, bias=True)

    def separators(self, op):
        """``[2, width]``: the row end (``sub_img_feature_extensor``), then the global separator."""
        width = op.Constant(value_ints=[1, -1])
        row_end = op.Reshape(self.sub_img_feature_extensor, width)
        return op.Concat(row_end, op.Reshape(self.global_img_feature_extensor, width), axis=0)

    def forward(self, op, x):
        return self.img_projection_down(op, self.act(op, self.img_projection_up(op, x)))


def _i64(value) -> ir.Tensor:
    return ir.tensor(np.asarray(value, np.int64))


def hd_token_indices(op, image_sizes, pooled_mask, base: int, crop_size: int):
    """The feature-table rows, in output order, of every image's tokens (``[tokens]`` int64).

    The table holds each crop's pooled ``base x base`` features (``[images * crops *
    base², width]``, crop 0 of each image its global view), then the row end, then the
    separator. ``pooled_mask [images, crops, base, base]`` (the patch mask at every
    second patch) lies as the features do, so one index reads both. ``image_sizes``
    gives each image's grid of sub-crops (its size over ``crop_size``).
    """

    def k(value):
        return op.Constant(value=_i64(value))

    images = op.Shape(pooled_mask, start=0, end=1)  # [1]
    crops = op.Shape(pooled_mask, start=1, end=2)  # [1]
    area = base * base
    row_end = op.Mul(op.Mul(images, crops), k(area))  # [1]: the table row after the features
    separator = op.Add(row_end, k(1))
    grid = op.Div(image_sizes, k(crop_size))  # [images, 2]: sub-crop rows, columns
    grid_rows = op.Unsqueeze(op.Slice(grid, [0], [1], [1]), [2])  # [images, 1, 1]
    grid_cols = op.Unsqueeze(op.Slice(grid, [1], [2], [1]), [2])
    # Candidates: the batch's largest grid of pooled features, one more column for row ends.
    most = op.Mul(op.ReduceMax(grid, [0], keepdims=0), k(base))  # [2]
    rows_max = op.Squeeze(op.Slice(most, [0], [1], [0]), [0])
    cols_max = op.Add(op.Squeeze(op.Slice(most, [1], [2], [0]), [0]), k(1))
    r = op.Reshape(op.Range(k(0), rows_max, k(1)), op.Constant(value_ints=[1, -1, 1]))
    col = op.Reshape(op.Range(k(0), cols_max, k(1)), op.Constant(value_ints=[1, 1, -1]))
    image = op.Reshape(
        op.Range(k(0), op.Squeeze(images, [0]), k(1)), op.Constant(value_ints=[-1, 1, 1])
    )
    crop_row, crop_col = op.Div(r, k(base)), op.Div(col, k(base))
    inside = op.And(op.Less(crop_row, grid_rows), op.Less(crop_col, grid_cols))
    sub_crop = op.Where(inside, op.Add(op.Mul(crop_row, grid_cols), crop_col), k(0))
    crop = op.Add(op.Mul(image, crops), op.Add(sub_crop, k(1)))  # [images, R, W]
    within = op.Add(op.Mul(op.Mod(r, k(base)), k(base)), op.Mod(col, k(base)))
    at = op.Add(op.Mul(crop, k(area)), within)
    real = op.Where(inside, op.Gather(op.Reshape(pooled_mask, [-1]), at), k(0))
    # transformers keeps the rows real in the grid's first column, the columns in its first row.
    useful_rows = op.ReduceSum(op.Gather(real, k(0), axis=2), [1], keepdims=1)  # [images, 1]
    useful_cols = op.ReduceSum(op.Gather(real, k(0), axis=1), [1], keepdims=1)
    useful_rows, useful_cols = op.Unsqueeze(useful_rows, [2]), op.Unsqueeze(useful_cols, [2])
    sub_index = op.Where(op.Equal(col, useful_cols), row_end, at)
    sub_keep = op.And(op.Less(r, useful_rows), op.LessOrEqual(col, useful_cols))
    # The global view's rows, each ended, after the separator.
    local = np.arange(base)[:, None] * base + np.arange(base + 1)[None, :]
    ends = np.broadcast_to(np.arange(base + 1) == base, (base, base + 1))
    global_at = op.Add(
        op.Mul(op.Reshape(image, [-1, 1]), op.Mul(crops, k(area))), k(local.reshape(1, -1))
    )
    ends = op.Constant(value=ir.tensor(np.ascontiguousarray(ends).reshape(1, -1)))
    global_index = op.Where(ends, row_end, global_at)  # [images, base * (base + 1)]
    one_column = op.Concat(images, [1], axis=0)
    per_image = op.Concat(images, [-1], axis=0)
    index = op.Concat(
        op.Reshape(sub_index, per_image),
        op.Expand(separator, one_column),
        global_index,
        axis=1,
    )
    true = op.Constant(value=ir.tensor(np.array(True)))
    keep = op.Concat(
        op.Reshape(sub_keep, per_image),
        op.Expand(true, one_column),
        op.Expand(true, op.Shape(global_index)),
        axis=1,
    )
    return op.Compress(op.Reshape(index, [-1]), op.Reshape(keep, [-1]))


class Phi4MultimodalForCausalLM(HearingMixin, VisionLanguageModel):
    """Phi-4-multimodal's image and audio paths into Phi-3's decoder (module docstring)."""

    config_class = Phi4MultimodalConfig
    renames: ClassVar[dict[str, str]] = {
        "model.embed_tokens_extend.image_embed.img_processor.": "vision_tower.",
        "model.embed_tokens_extend.image_embed.": "multi_modal_projector.",
        "model.embed_tokens_extend.audio_embed.": "audio_tower.",
        "model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: Phi4MultimodalConfig) -> None:
        nn.Module.__init__(self)  # the towers and decoder are fixed, not looked up by type
        self.config = config
        self.vision_tower = Idefics3VisionTransformer(config.vision)
        self.multi_modal_projector = Phi4MultimodalImageProjector(
            config.vision.hidden_size, config.text.hidden_size
        )
        self.audio_tower = Phi4MultimodalAudioEmbedding(config.audio, config.text.hidden_size)
        self.language_model = Phi3ForCausalLM(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        size, side = self.config.vision.image_size[0], self.config.vision.patches_per_side
        channels = self.config.vision.num_channels
        return [
            ("image_pixel_values", dtype, ["num_images", "num_crops", channels, size, size]),
            ("image_sizes", INT64, ["num_images", 2]),
            # float, as onnxruntime-genai feeds it (1.0 on a real patch)
            ("image_attention_mask", dtype, ["num_images", "num_crops", side, side]),
        ]

    def audio_inputs(self, dtype) -> list[tuple]:
        clips = "num_audios"
        return [
            ("input_features", dtype, [clips, "audio_frames", self.config.audio.input_size]),
            ("feature_attention_mask", ir.DataType.BOOL, [clips, "audio_frames"]),
            ("audio_sizes", INT64, [clips]),
            ("audio_projection_mode", INT64, [1]),
        ]

    def audio_features(
        self, op, input_features, feature_attention_mask, audio_sizes, audio_projection_mode
    ):
        return self.audio_tower(
            op, input_features, feature_attention_mask, audio_sizes, audio_projection_mode
        )

    @property
    def depth(self) -> int:
        """The tower layers run: ``hidden_states[feature_layer]`` needs no more."""
        return layer_index(self.config.feature_layer, self.config.vision.num_hidden_layers)

    def image_features(self, op, image_pixel_values, image_sizes, image_attention_mask):
        vision = self.config.vision
        size, side, width = vision.image_size[0], vision.patches_per_side, vision.hidden_size
        pixels = op.Reshape(image_pixel_values, [-1, vision.num_channels, size, size])
        masks = op.Cast(op.Reshape(image_attention_mask, [-1, side, side]), to=ir.DataType.BOOL)
        with module_scope(op, self.vision_tower):
            states = self.vision_tower.hidden_states(op, pixels, self.depth, masks)[self.depth]
        grid = op.Transpose(op.Reshape(states, [-1, side, side, width]), perm=[0, 3, 1, 2])
        pooled = op.AveragePool(grid, kernel_shape=[2, 2], strides=[2, 2])
        table = op.Reshape(op.Transpose(pooled, perm=[0, 2, 3, 1]), [-1, width])
        projector = self.multi_modal_projector
        with module_scope(op, projector):
            table = op.Concat(table, projector.separators(op), axis=0)
        real = op.Cast(op.Cast(image_attention_mask, to=ir.DataType.BOOL), to=INT64)
        pooled_mask = op.Slice(real, [0, 0], [side, side], [2, 3], [2, 2])
        rows = hd_token_indices(op, image_sizes, pooled_mask, side // 2, self.config.crop_size)
        return projector(op, op.Gather(table, rows, axis=0))

    @property
    def ignored(self) -> tuple[str, ...]:
        layers = self.config.vision.num_hidden_layers
        unused = [f"vision_tower.encoder.layers.{i}.*" for i in range(self.depth, layers)]
        return (
            *super().ignored,
            *unused,
            "vision_tower.post_layernorm.*",
            "vision_tower.head.*",
        )


MODEL_TYPES = {"phi4_multimodal": Phi4MultimodalForCausalLM}

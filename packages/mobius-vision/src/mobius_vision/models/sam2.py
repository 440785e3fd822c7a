"""SAM 2's image predictor (``sam2``): a Hiera encoder with an FPN neck, SAM's prompt decoder.

As transformers 5 computes ``Sam2Model.get_image_embeddings`` and ``forward`` given
them. The image encoder (:mod:`._hiera` and the neck's lateral convolutions, with a
nearest top-down path on ``fpn_top_down_levels``) returns three levels: the lowest
resolution, plus ``no_memory_embedding`` (an image without video memory), is
``image_embeddings`` ``[b, C, h, w]``; the two higher ones, through the mask decoder's
``conv_s0`` and ``conv_s1``, are ``high_resolution_features.0`` ``[b, C / 8, 4h, 4w]``
and ``high_resolution_features.1`` ``[b, C / 4, 2h, 2w]``. The neck's sine position
encodings feed only the video memory, so the image encoder does not compute them.

The delta of the prompt decoder from SAM's (:mod:`._sam_decoder`):

- the prompt encoder has its own Fourier matrix (``prompt_encoder.shared_embedding``,
  not tied to ``shared_image_embedding``), one ``point_embed`` table (labels 0 to 3), and
  a box is three tokens: its corners and a not-a-point token;
- the mask decoder puts an object-score token before the IoU token, adds the
  high-resolution features to its upscaling, ends its IoU head with a sigmoid, uses
  ReLU MLPs of ``num_hidden_layers`` layers and ``nn.LayerNorm``'s eps in its two-way
  transformer, and names its attention output ``o_proj``;
- the prompt decoder graph also returns ``object_score_logits`` ``[b, pb, 1]``
  (``pred_obj_score_head`` over the object-score token: above 0, the object is in the
  image). As in transformers' ``Sam2Model`` (and the original image predictor), the
  masks are not changed by it: only the video tracker (``Sam2VideoModel``) replaces
  the masks of an absent object by -1024. A user may do the same with this output.

``multimask_output=True`` as transformers' default (three masks per prompt). The video
path (``sam2_video``: memory attention and encoder) is another model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import Conv2d, Embedding, module_scope
from mobius.errors import ConfigError
from mobius_vision.models._hiera import HieraConfig, HieraModel
from mobius_vision.models._sam_decoder import (
    TORCH_LAYER_NORM_EPS,
    SamDecoderConfig,
    SamFeedForward,
    SamMaskDecoder,
    SamPositionalEmbedding,
    SamPromptEncoder,
    mask_prompt_settings,
    normalised_coordinates,
    per_prompt,
)
from mobius_vision.models.sam import SamModel

#: transformers' names of the three image outputs the mask decoder reads.
IMAGE_EMBEDDINGS = "image_embeddings"
HIGH_RESOLUTION = ("high_resolution_features.0", "high_resolution_features.1")


@dataclass
class Sam2VisionConfig:
    """The Hiera backbone and the FPN neck (``fpn_hidden_size`` channels on every level)."""

    hiera: HieraConfig
    fpn_hidden_size: int
    fpn_kernel_size: int
    fpn_padding: int
    fpn_top_down_levels: list[int]

    @classmethod
    def from_hf(cls, hf: Any) -> Sam2VisionConfig:
        hiera = HieraConfig.from_hf(hf.backbone_config)
        config = cls(
            hiera=hiera,
            fpn_hidden_size=int(hf.fpn_hidden_size),
            fpn_kernel_size=int(hf.fpn_kernel_size),
            fpn_padding=int(hf.fpn_padding),
            fpn_top_down_levels=[int(level) for level in hf.fpn_top_down_levels],
        )
        kind = str(hf.model_type)
        channels = [int(c) for c in hf.backbone_channel_list]
        if channels != hiera.embed_dim_per_stage[::-1]:
            raise ConfigError(
                f"{kind}: backbone_channel_list {channels} is not the Hiera stage widths "
                f"{hiera.embed_dim_per_stage}, lowest resolution first"
            )
        if int(hf.num_feature_levels) != 3 or len(channels) < 3:
            raise ConfigError(
                f"{kind}: the image predictor reads three feature levels, got "
                f"num_feature_levels {hf.num_feature_levels} of {len(channels)} stages"
            )
        # the lateral convolutions must keep each grid, or the top-down sums would not add
        if int(hf.fpn_stride) != 1 or 2 * config.fpn_padding != config.fpn_kernel_size - 1:
            raise ConfigError(f"{kind}: the FPN convolutions change the grid size")
        return config


@dataclass
class Sam2Config:
    """The image encoder's config and the prompt decoder's; ``image_size`` is the encoder's."""

    model_type: str
    vision: Sam2VisionConfig
    decoder: SamDecoderConfig
    num_point_embeddings: int

    @classmethod
    def from_hf(cls, hf_config: Any) -> Sam2Config:
        vision = Sam2VisionConfig.from_hf(hf_config.vision_config)
        prompt, decoder = hf_config.prompt_encoder_config, hf_config.mask_decoder_config
        image_size, patch_size = int(prompt.image_size), int(prompt.patch_size)
        kind = str(hf_config.model_type)
        if patch_size < 1 or image_size % patch_size:
            raise ConfigError(f"{kind}: prompt image_size {image_size} is not whole patches")
        decoder_config = SamDecoderConfig(
            hidden_size=int(decoder.hidden_size),
            num_pos_feats=int(prompt.hidden_size) // 2,
            input_image_size=image_size,
            embedding_size=image_size // patch_size,
            num_hidden_layers=int(decoder.num_hidden_layers),
            num_attention_heads=int(decoder.num_attention_heads),
            mlp_dim=int(decoder.mlp_dim),
            hidden_act="relu",  # the two-way transformer's MLP: Sam2FeedForward's default
            layer_norm_eps=TORCH_LAYER_NORM_EPS,  # its norms are nn.LayerNorm(hidden_size)
            attention_downsample_rate=int(decoder.attention_downsample_rate),
            num_multimask_outputs=int(decoder.num_multimask_outputs),
            iou_head_depth=int(decoder.iou_head_depth),
            iou_head_hidden_dim=int(decoder.iou_head_hidden_dim),
            **mask_prompt_settings(prompt),
        )
        decoder_config.check(kind)
        config = cls(kind, vision, decoder_config, int(prompt.num_point_embeddings))
        config.check(hf_config.vision_config.backbone_feature_sizes)
        return config

    def check(self, backbone_feature_sizes: Any) -> None:
        """The encoder's levels are the sizes the decoder and transformers' config say."""
        kind, c = self.model_type, self.decoder.hidden_size
        if self.vision.fpn_hidden_size != c:
            raise ConfigError(
                f"{kind}: fpn_hidden_size {self.vision.fpn_hidden_size} is not the mask "
                f"decoder's hidden_size {c}"
            )
        if self.num_point_embeddings < 4:
            raise ConfigError(f"{kind}: num_point_embeddings < 4 (two labels and two corners)")
        sizes = [list(size) for size in self.level_sizes]
        declared = [[int(v) for v in size] for size in backbone_feature_sizes]
        if declared != sizes:
            raise ConfigError(
                f"{kind}: backbone_feature_sizes {declared} are not the encoder's levels {sizes}"
            )
        s = self.decoder.embedding_size
        if sizes[2] != [s, s] or sizes[1] != [2 * s, 2 * s] or sizes[0] != [4 * s, 4 * s]:
            raise ConfigError(
                f"{kind}: the image embedding grid {sizes[2]} (and the high-resolution "
                f"ones {sizes[:2]}) do not match the prompt encoder's {s}x{s}"
            )

    @property
    def level_sizes(self) -> list[tuple[int, int]]:
        """The three levels' grids, high resolution first (the first three stages')."""
        hiera = self.vision.hiera
        size, sizes = hiera.grid, []
        for settings in hiera.block_settings():
            stride = settings[5] or 1
            size = (size[0] // stride, size[1] // stride)
            sizes.append(size)
        ends = [sum(hiera.blocks_per_stage[: i + 1]) - 1 for i in range(3)]
        return [sizes[end] for end in ends]

    @property
    def image_size(self) -> tuple[int, int]:
        return self.vision.hiera.image_size

    @property
    def num_channels(self) -> int:
        return self.vision.hiera.num_channels


class Sam2VisionNeck(nn.Module):
    """One lateral convolution per stage (``convs``, lowest resolution first) and a
    nearest 2x top-down path into the levels of ``fpn_top_down_levels``."""

    def __init__(self, config: Sam2VisionConfig) -> None:
        super().__init__()
        widths = config.hiera.embed_dim_per_stage[::-1]
        self.convs = nn.ModuleList(
            [
                Conv2d(
                    width,
                    config.fpn_hidden_size,
                    config.fpn_kernel_size,
                    padding=config.fpn_padding,
                )
                for width in widths
            ]
        )
        self.top_down_levels = config.fpn_top_down_levels

    def forward(self, op, stages: list) -> list:
        """Channels-last stage outputs (high resolution first) to the three highest-resolution
        levels ``[b, C, h_i, w_i]``, high resolution first."""
        last = len(stages) - 1
        levels, previous = [], None
        for i in range(last, -1, -1):
            lateral = self.convs[last - i](op, op.Transpose(stages[i], perm=[0, 3, 1, 2]))
            if i in self.top_down_levels and i != last:
                upsampled = op.Resize(
                    previous,
                    None,
                    op.Constant(value_floats=[1.0, 1.0, 2.0, 2.0]),
                    mode="nearest",
                    coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor",
                )
                lateral = op.Add(lateral, upsampled)
            previous = lateral
            levels.append(lateral)
        return levels[-3:][::-1]


class Sam2VisionEncoder(nn.Module):
    """``backbone`` (Hiera) and ``neck`` (transformers' ``Sam2VisionModel``)."""

    def __init__(self, config: Sam2VisionConfig) -> None:
        super().__init__()
        self.backbone = HieraModel(config.hiera)
        self.neck = Sam2VisionNeck(config)

    def forward(self, op, pixel_values) -> list:
        return self.neck(op, self.backbone(op, pixel_values))


class Sam2PromptEncoder(SamPromptEncoder):
    """SAM's, with its own Fourier matrix, one ``point_embed`` table and 3-token boxes."""

    def __init__(self, config: SamDecoderConfig, num_point_embeddings: int) -> None:
        super().__init__(config)
        self.shared_embedding = SamPositionalEmbedding(config.num_pos_feats)
        self.point_embed = Embedding(num_point_embeddings, config.hidden_size)

    def embed_points(self, op, encoded, labels):
        """-1: not a point; -10: nothing; a label from 0 adds its ``point_embed`` row."""
        labels = op.Unsqueeze(labels, [-1])
        encoded = op.Where(
            op.Equal(labels, op.Constant(value_int=-1)),
            self.not_a_point_embed(op, op.Constant(value_ints=[0])),
            encoded,
        )
        encoded = op.Where(
            op.Equal(labels, op.Constant(value_int=-10)), op.CastLike(0.0, encoded), encoded
        )
        rows = self.point_embed(op, op.Squeeze(op.Max(labels, op.Constant(value_int=0)), [-1]))
        is_label = op.GreaterOrEqual(labels, op.Constant(value_int=0))
        return op.Where(is_label, op.Add(encoded, rows), encoded)

    def embed_boxes(self, op, encoded_corners, point_batch):
        """``[b, boxes, 2, C]`` to ``[b, point_batch, 3 * (boxes > 0), C]``: the corners
        (``point_embed`` rows 2 and 3 added) and a not-a-point token per box."""
        corners = op.Add(encoded_corners, self.point_embed(op, op.Constant(value_ints=[2, 3])))
        shape = op.Concat(
            op.Shape(corners, start=0, end=2), op.Constant(value_ints=[1, self.hidden_size]), axis=0
        )
        padding = op.Expand(self.not_a_point_embed(op, op.Constant(value_ints=[0])), shape)
        tokens = op.Concat(corners, padding, axis=2)
        shape = op.Concat(
            op.Constant(value_ints=[0]),
            point_batch,
            op.Constant(value_ints=[-1, self.hidden_size]),
            axis=0,
        )
        return op.Reshape(tokens, shape)


class Sam2MaskDecoder(SamMaskDecoder):
    """SAM's decoder with the object-score token and head, high-resolution features and
    sigmoid IoU."""

    def __init__(self, config: SamDecoderConfig) -> None:
        super().__init__(config)
        c = config.hidden_size
        # the two-way blocks' MLP is Sam2FeedForward: ReLU, num_hidden_layers linear layers
        for layer in self.transformer.layers:
            layer.mlp = SamFeedForward(c, config.mlp_dim, c, config.num_hidden_layers)
        self.obj_score_token = Embedding(1, c)
        self.pred_obj_score_head = SamFeedForward(c, c, 1, 3)
        self.conv_s0 = Conv2d(c, c // 8, 1)
        self.conv_s1 = Conv2d(c, c // 4, 1)

    def output_tokens(self, op, sparse):
        """The object-score token, then SAM's IoU and mask tokens, then the prompt's."""
        tokens = super().output_tokens(op, sparse)
        shape = op.Concat(
            op.Shape(sparse, start=0, end=2), op.Constant(value_ints=[1, self.hidden_size]), axis=0
        )
        score = op.Expand(self.obj_score_token(op, op.Constant(value_ints=[0])), shape)
        return op.Concat(score, tokens, axis=2)

    def token(self, op, queries, index: int):
        """SAM's token ``index`` (0: IoU), one place later behind the object-score token."""
        return super().token(op, queries, index + 1)

    def predict(self, op, queries, keys, image, prompt_shape, image_embeddings, feat_s0, feat_s1):
        """SAM's prediction with ``feat_s1`` and ``feat_s0`` added after each upscaling and
        a sigmoid on the IoU head; then the object score logit ``[n, 1]``."""
        iou = op.Sigmoid(self.iou_prediction_head(op, self.token(op, queries, 0)))
        x = self.upscale_conv1(op, self.grid(op, keys))
        x = op.Gelu(self.upscale_layer_norm(op, op.Add(x, per_prompt(op, feat_s1, prompt_shape))))
        x = op.Add(self.upscale_conv2(op, x), per_prompt(op, feat_s0, prompt_shape))
        upscaled = op.Reshape(op.Gelu(x), op.Constant(value_ints=[0, self.hidden_size // 8, -1]))
        score = self.pred_obj_score_head(op, super().token(op, queries, 0))
        return op.MatMul(self.hypernetwork(op, queries), upscaled), iou, score


class Sam2Model(SamModel):
    """SAM 2's image predictor on the ``mask-generation`` contract (module docstring)."""

    config_class = Sam2Config
    #: The video path's tensors are not built (the image predictor reads none of them).
    ignored = (
        "memory_*",
        "mask_downsample.*",
        "object_pointer_proj.*",
        "temporal_positional_encoding_projection_layer.*",
        "no_memory_positional_encoding",
        "no_object_pointer",
        "occlusion_spatial_embedding_parameter",
    )
    vision_encoder_class: ClassVar[type] = Sam2VisionEncoder
    mask_decoder_class: ClassVar[type] = Sam2MaskDecoder

    def __init__(self, config: Sam2Config) -> None:
        super().__init__(config)
        self.prompt_encoder = Sam2PromptEncoder(config.decoder, config.num_point_embeddings)
        self.no_memory_embedding = nn.Parameter([1, 1, config.decoder.hidden_size])

    def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
        """The two-way transformer's ``o_proj`` is SAM's ``out_proj``; no tied copies."""
        return {name.replace(".o_proj.", ".out_proj."): value for name, value in weights.items()}

    def image_outputs(self) -> dict[str, list]:
        c, s = self.config.decoder.hidden_size, self.config.decoder.embedding_size
        return {
            IMAGE_EMBEDDINGS: ["batch", c, s, s],
            HIGH_RESOLUTION[0]: ["batch", c // 8, 4 * s, 4 * s],
            HIGH_RESOLUTION[1]: ["batch", c // 4, 2 * s, 2 * s],
        }

    def encode_image(self, op, pixel_values) -> dict:
        """The three levels (module docstring); the mask decoder's ``conv_s0`` and ``conv_s1``
        run here, once per image, under their checkpoint names."""
        s0, s1, embeddings = self.vision_encoder(op, pixel_values)
        with module_scope(op, self):
            no_memory = op.Reshape(self.no_memory_embedding, op.Constant(value_ints=[1, -1, 1, 1]))
        with module_scope(op, self.mask_decoder):
            high_resolution = self.mask_decoder.conv_s0(op, s0), self.mask_decoder.conv_s1(op, s1)
        return {
            IMAGE_EMBEDDINGS: op.Add(embeddings, no_memory),
            **dict(zip(HIGH_RESOLUTION, high_resolution, strict=True)),
        }

    def image_extras(self, image: dict) -> tuple:
        return tuple(image[name] for name in HIGH_RESOLUTION)

    def prompt_outputs(self) -> dict[str, list]:
        """SAM's outputs and ``object_score_logits`` ``[batch, point_batch, 1]``."""
        return {**super().prompt_outputs(), "object_score_logits": ["batch", "point_batch", 1]}

    def encode_coordinates(self, op, coordinates):
        """Through the prompt encoder's own Fourier matrix (not the image's)."""
        size = self.config.decoder.input_image_size
        with module_scope(op, self.prompt_encoder):
            return self.prompt_encoder.shared_embedding(
                op, normalised_coordinates(op, coordinates, size)
            )

    def multimask(self, op, masks, iou, object_score) -> dict:
        """SAM's multimask outputs and the object score logit (one per prompt)."""
        return {**super().multimask(op, masks, iou), "object_score_logits": object_score}


MODEL_TYPES = {"sam2": Sam2Model}

"""DeepSeek-OCR 2 (``deepseek_ocr2``): a SAM tower, a Qwen2 stack that reads it into learned
queries, and DeepSeek-V2's experts under plain attention as the decoder.

Each image comes as a global view (``pixel_values``, the SAM tower's own size) and,
when it is larger than a tile, as local tiles (``pixel_values_local``, all images'
tiles stacked; ``num_local_patches`` says how many are each image's). Every view:

1. SAM (GOT-OCR 2.0's ViTDet, :mod:`._sam_any_grid`; tiles run at a smaller grid) and
   its neck, then ``proj``: two 3x3 stride-2 convs (``downsample_channels``);
2. the map's cells, then a learned query table, go through a Qwen2 stack whose
   image cells attend to each other both ways and whose queries attend causally
   (``vision_encoder``); the queries' outputs are the view's features. The table is
   ``query_768_resolution`` (12 x 12) when the map has at most 144 cells, else
   ``query_1024_resolution`` (16 x 16);
3. ``multi_modal_projector`` (one linear) to the decoder's width.

An image's tokens are its tiles' features, its global view's, then ``view_separator``.
Tiles are SAM grids of 48 patches a side: the grid whose map fills the 12 x 12 table
(768 pixels at the hub's patch of 16, the processor's ``tile_size``).

The decoder is mobius-text's ``deepseek_ocr2_text``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Conv2d,
    Embedding,
    Linear,
    RMSNorm,
    attention_bias,
    bidirectional_blocks,
    make_rotary_embedding,
    module_scope,
    scan_body,
)
from mobius.config import first_of
from mobius.errors import ConfigError
from mobius_text.models.deepseek_ocr2_text import (
    DeepseekOcr2TextConfig,
    DeepseekOcr2TextForCausalLM,
)
from mobius_text.models.qwen import Qwen2Model, QwenConfig
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._sam_any_grid import SamAnyGridEncoder
from mobius_vision.models._vl import VisionLanguageModel, flatten_images
from mobius_vision.models.got_ocr2 import GotOcr2VisionConfig

#: A SAM block's norms as the hub names them (``blocks.0.norm1.``), after the prefix renames.
SAM_NORM = re.compile(r"^(vision_tower\.sam_encoder\.layers\.\d+\.)norm([12])\.")
#: The learned query tables by side: a map of at most 12 x 12 cells reads the first.
QUERY_TABLES = {12: "query_768_resolution", 16: "query_1024_resolution"}
#: SAM patches a side of a local tile: four times the small table's side.
TILE_GRID = 48


def halved_twice(grid: int) -> int:
    """The side of the map after two 3x3 stride-2 convs with padding 1."""
    once = math.ceil(grid / 2)
    return math.ceil(once / 2)


def query_side(grid: int) -> int:
    """The side of the query table a SAM grid of ``grid`` reads."""
    return 12 if halved_twice(grid) ** 2 <= 144 else 16


@dataclass
class DeepseekOcr2Config(VisionLanguageConfig):
    #: The Qwen2 stack's config (``vision_config.encoder_config``).
    encoder: Any = None
    #: The channels of ``proj``'s two convs (``sam_config.downsample_channels``).
    downsample_channels: tuple[int, int] = (512, 896)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        vision = hf_config.vision_config
        sam = GotOcr2VisionConfig.from_hf(vision.sam_config)
        channels = vision.sam_config.downsample_channels
        if not (
            isinstance(channels, (list, tuple))
            and len(channels) == 2
            and all(isinstance(c, int) and c > 0 for c in channels)
        ):
            raise ConfigError(f"deepseek_ocr2: downsample_channels {channels!r} is not two sizes")
        encoder = QwenConfig.from_hf(vision.encoder_config)
        if encoder.hidden_size != channels[1]:
            raise ConfigError(
                f"deepseek_ocr2: the encoder's hidden_size {encoder.hidden_size} is not the "
                f"SAM projection's {channels[1]} channels"
            )
        longest = max(halved_twice(g) ** 2 + query_side(g) ** 2 for g in (sam.grid, TILE_GRID))
        if longest > encoder.max_position_embeddings:
            raise ConfigError(
                f"deepseek_ocr2: the encoder reads {longest} tokens a view, past its "
                f"max_position_embeddings {encoder.max_position_embeddings}"
            )
        return dict(
            model_type=hf_config.model_type,
            vision=sam,
            text=DeepseekOcr2TextConfig.from_hf(cls.text_hf_config(hf_config)),
            image_token_id=int(first_of(hf_config, "image_token_id", "image_token_index")),
            encoder=encoder,
            downsample_channels=(int(channels[0]), int(channels[1])),
        )

    @property
    def tile_size(self) -> int:
        """A local tile's side in pixels."""
        return TILE_GRID * self.vision.patch_size


class DeepseekOcr2SamProj(nn.Module):
    """Two 3x3 stride-2 convs without biases (``sam_encoder.proj``)."""

    def __init__(self, channels: int, downsample: tuple[int, int]) -> None:
        super().__init__()
        self.conv1 = Conv2d(channels, downsample[0], 3, stride=2, padding=1, bias=False)
        self.conv2 = Conv2d(downsample[0], downsample[1], 3, stride=2, padding=1, bias=False)

    def forward(self, op, x):
        return self.conv2(op, self.conv1(op, x))


class DeepseekOcr2SamEncoder(SamAnyGridEncoder):
    """SAM, its neck and ``proj``: ``[b, c, h, w]`` to ``[b, cells, downsample_channels[1]]``."""

    def __init__(self, config: DeepseekOcr2Config) -> None:
        super().__init__(config.vision)
        self.proj = DeepseekOcr2SamProj(config.vision.output_channels, config.downsample_channels)

        self.channels = config.downsample_channels[1]

    def forward(self, op, pixel_values, grid: int):
        x = self.proj(op, super().forward(op, pixel_values, grid))
        cells = halved_twice(grid) ** 2  # spelt out: a batch of no tiles reshapes too
        x = op.Reshape(x, op.Constant(value_ints=[-1, self.channels, cells]))
        return op.Transpose(x, perm=[0, 2, 1])


class DeepseekOcr2VisionEncoder(Qwen2Model):
    """Qwen2's layers and norm (no token embedding) over ``[cells | queries]``: the cells see
    each other both ways, every token sees the cells and the queries before it."""

    def __init__(self, config: QwenConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.layers = nn.ModuleList(
            [self.make_layer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )

    def forward(self, op, x, cells: int, length: int):
        """``x [b, length, hidden]`` whose first ``cells`` tokens are the image's."""
        rows = op.Concat(op.Shape(x, start=0, end=1), [length], axis=0)  # [b, length]
        positions = op.Expand(op.Constant(value=ir.tensor(np.arange(length, dtype=np.int64))), rows)
        blocks = np.where(np.arange(length) < cells, 0, -1).astype(np.int64)
        blocks = op.Expand(op.Constant(value=ir.tensor(blocks)), rows)
        real = op.Expand(op.Constant(value_ints=[1]), rows)
        with bidirectional_blocks(blocks):
            bias = attention_bias(op, real, op.Constant(value_int=length), x.dtype)
        rope = self.rotary_emb(op, positions)
        for layer in self.layers:
            x, _ = layer(op, x, rope, bias, None, None)
        return self.norm(op, x)


class DeepseekOcr2VisionModel(nn.Module):
    """HF ``DeepseekOcr2VisionModel``: one view's query features ``[b, queries, hidden]``."""

    def __init__(self, config: DeepseekOcr2Config) -> None:
        super().__init__()
        width = config.encoder.hidden_size
        self.sam_encoder = DeepseekOcr2SamEncoder(config)
        self.vision_encoder = DeepseekOcr2VisionEncoder(config.encoder)
        self.query_768_resolution = Embedding(12 * 12, width)
        self.query_1024_resolution = Embedding(16 * 16, width)

    def forward(self, op, pixel_values, grid: int):
        cells = self.sam_encoder(op, pixel_values, grid)  # [b, cells, width]
        side = query_side(grid)
        table = getattr(self, QUERY_TABLES[side])
        with module_scope(op, table):
            queries = table.weight
        count = halved_twice(grid) ** 2
        batch = op.Concat(op.Shape(cells, start=0, end=1), [1, 1], axis=0)
        queries = op.Expand(op.Unsqueeze(queries, [0]), batch)  # [b, side * side, width]
        x = op.Concat(cells, queries, axis=1)
        x = self.vision_encoder(op, x, count, count + side * side)
        return op.Slice(x, [count], [count + side * side], [1])


class DeepseekOcr2ForConditionalGeneration(VisionLanguageModel):
    """The SAM + Qwen2 tower, the linear projector and ``deepseek_ocr2_text``."""

    config_class = DeepseekOcr2Config
    tower_class = DeepseekOcr2VisionModel

    def __init__(self, config: DeepseekOcr2Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = DeepseekOcr2VisionModel(config)
        self.multi_modal_projector = Linear(
            config.encoder.hidden_size, config.text.hidden_size, bias=True
        )
        self.view_separator = nn.Parameter([config.text.hidden_size])
        self.language_model = DeepseekOcr2TextForCausalLM(config.text)

    #: The hub's layout (the one transformers writes back on save), then transformers' own.
    renames = {
        "model.sam_model.blocks.": "vision_tower.sam_encoder.layers.",
        "model.sam_model.patch_embed.proj.": "vision_tower.sam_encoder.patch_embed.projection.",
        "model.sam_model.pos_embed": "vision_tower.sam_encoder.pos_embed",
        "model.sam_model.neck.0.": "vision_tower.sam_encoder.neck.conv1.",
        "model.sam_model.neck.1.": "vision_tower.sam_encoder.neck.layer_norm1.",
        "model.sam_model.neck.2.": "vision_tower.sam_encoder.neck.conv2.",
        "model.sam_model.neck.3.": "vision_tower.sam_encoder.neck.layer_norm2.",
        "model.sam_model.net_2.": "vision_tower.sam_encoder.proj.conv1.",
        "model.sam_model.net_3.": "vision_tower.sam_encoder.proj.conv2.",
        "model.qwen2_model.model.model.": "vision_tower.vision_encoder.",
        "model.qwen2_model.query_768.": "vision_tower.query_768_resolution.",
        "model.qwen2_model.query_1024.": "vision_tower.query_1024_resolution.",
        "model.projector.layers.": "multi_modal_projector.",
        "model.view_seperator": "view_separator",
        "model.view_separator": "view_separator",
        "model.embed_tokens.": "language_model.model.embed_tokens.",
        "model.layers.": "language_model.model.layers.",
        "model.norm.": "language_model.model.norm.",
        **VisionLanguageModel.renames,
    }

    def sanitize(self, weights: dict) -> dict:
        """:attr:`renames`, and the hub's SAM block norms (``norm1``) under their module names."""
        weights = super().sanitize(weights)
        return {SAM_NORM.sub(r"\1layer_norm\2.", name): w for name, w in weights.items()}

    def vision_inputs(self, dtype) -> list[tuple]:
        size, tile = self.config.vision.image_size[0], self.config.tile_size
        channels = self.config.vision.num_channels
        return [
            ("pixel_values", dtype, ["num_images", channels, size, size]),
            ("pixel_values_local", dtype, ["num_tiles", channels, tile, tile]),
            ("num_local_patches", ir.DataType.INT64, ["num_images"]),
        ]

    def view_features(self, op, pixel_values, grid: int):
        """``[views * queries, text_hidden]``: one kind of view, projected."""
        with module_scope(op, self.vision_tower):
            features = self.vision_tower.forward(op, pixel_values, grid)
        return flatten_images(op, self.multi_modal_projector(op, features))

    def image_features(self, op, pixel_values, pixel_values_local, num_local_patches):
        self.view_separator._realize(op.builder)  # noqa: SLF001  (a root-level parameter)
        native = self.config.vision.grid
        global_rows = self.view_features(op, pixel_values, native)
        local_rows = self.local_features(op, pixel_values_local)
        table = op.Concat(local_rows, global_rows, op.Unsqueeze(self.view_separator, [0]), axis=0)
        order = self.token_order(
            op,
            num_local_patches,
            op.Shape(local_rows, start=0, end=1),
            query_side(TILE_GRID) ** 2,
            query_side(native) ** 2,
        )
        return op.Gather(table, order, axis=0)

    def local_features(self, op, pixel_values_local):
        """The tiles' :meth:`view_features`; none without tiles (the tower's head split
        cannot reshape an empty batch)."""
        dtype, width = pixel_values_local.dtype, self.config.text.hidden_size

        def branch(trace, name):
            out = ir.Value(name=f"{name}_rows", type=ir.TensorType(dtype))
            return scan_body(op, trace, inputs=[], outputs=[out], name=name)

        def tiles(op):
            return self.view_features(op, pixel_values_local, TILE_GRID)

        def no_tiles(op):
            empty = op.Constant(value_ints=[0, width])
            return op.ConstantOfShape(empty, value=ir.tensor(np.zeros(1, dtype.numpy())))

        # the tiles' query table named at the root before the branch (named in it, it would
        # lose its path), as the global view may read the other one
        table = getattr(self.vision_tower, QUERY_TABLES[query_side(TILE_GRID)])
        with module_scope(op, self.vision_tower, table):
            pass
        count = op.Shape(pixel_values_local, start=0, end=1)
        return op.If(
            op.Squeeze(op.Greater(count, op.Constant(value_ints=[0])), [0]),
            then_branch=branch(tiles, "tiles"),
            else_branch=branch(no_tiles, "no_tiles"),
        )

    def token_order(self, op, tiles, local_rows, per_tile: int, per_image: int):
        """Rows of ``[all tiles' features | all global views' | separator]`` in token order:
        per image, its tiles', its global view's, the separator."""
        int64 = ir.DataType.INT64
        tiles = op.Cast(tiles, to=int64)
        local_tokens = op.Mul(tiles, op.Constant(value_int=per_tile))  # [images]
        block = op.Add(local_tokens, op.Constant(value_int=per_image + 1))
        ends = op.CumSum(block, op.Constant(value_int=0))
        starts = op.Sub(ends, block)
        local_starts = op.Sub(op.CumSum(local_tokens, op.Constant(value_int=0)), local_tokens)
        total = op.ReduceSum(block, keepdims=0)
        rows = op.Range(op.Constant(value_int=0), total, op.Constant(value_int=1))  # [tokens]
        image = op.ReduceSum(
            op.Cast(op.GreaterOrEqual(op.Unsqueeze(rows, [1]), op.Unsqueeze(ends, [0])), to=int64),
            [1],
            keepdims=0,
        )  # the image each token belongs to
        offset = op.Sub(rows, op.Gather(starts, image))
        own_tiles = op.Gather(local_tokens, image)
        images = op.Shape(tiles, start=0, end=1)
        local = op.Add(op.Gather(local_starts, image), offset)
        global_ = op.Add(
            op.Add(local_rows, op.Mul(image, op.Constant(value_int=per_image))),
            op.Sub(offset, own_tiles),
        )
        separator = op.Add(local_rows, op.Mul(images, op.Constant(value_int=per_image)))
        return op.Where(
            op.Less(offset, own_tiles),
            local,
            op.Where(op.Less(offset, op.Add(own_tiles, per_image)), global_, separator),
        )

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower, self.multi_modal_projector]

    @property
    def ignored(self) -> tuple[str, ...]:
        """The query table neither view reads (a global view of at most 12 x 12 cells)."""
        read = {query_side(self.config.vision.grid), query_side(TILE_GRID)}
        unread = [
            f"vision_tower.{name}.weight" for side, name in QUERY_TABLES.items() if side not in read
        ]
        return (*super().ignored, *unread)


MODEL_TYPES = {"deepseek_ocr2": DeepseekOcr2ForConditionalGeneration}

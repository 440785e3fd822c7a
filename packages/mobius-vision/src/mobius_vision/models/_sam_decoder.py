"""SAM's prompt encoder and two-way mask decoder (the ``prompt_decoder`` graph of
:mod:`mobius_vision.tasks.mask_generation`).

The prompt encoder turns points and box corners into tokens: a random-Fourier encoding
of the coordinates (``shared_image_embedding``, a ``[2, C / 2]`` Gaussian matrix; the
image grid's encoding is a constant grid through the same matrix) plus a learned
embedding per label (0 background, 1 foreground, box corners 2 and 3); a point labelled
-1 is ``not_a_point_embed`` and -10 nothing. Without a box, transformers appends one
padding point (label -1): so does the graph, when ``input_boxes`` has no box.

The dense prompt is a previous low-resolution mask (``input_masks``) through
``mask_embed`` (two stride-2 convolutions to the embedding's grid, then a 1x1 one to its
channels), or, where ``has_input_mask`` is 0, the learned ``no_mask_embed``: the graph
computes both and picks per image, so one graph serves either prompt.

The mask decoder's two-way transformer attends the prompt tokens (after an IoU token and
one token per mask) to the image and back; the image is upscaled 4x by two transposed
convolutions and each mask token's hypernetwork MLP weights its channels into a mask.
Every (image, prompt) pair of ``[batch, point_batch]`` runs as one row of ``batch *
point_batch``. Submodules are named after transformers' ``SamModel`` keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Embedding, LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.models._conv import ChannelsLayerNorm
from mobius_vision.models.got_ocr2 import GotOcr2MLPBlock

#: transformers' ``nn.LayerNorm`` default: the decoder's final norm is built without eps.
TORCH_LAYER_NORM_EPS = 1e-5


@dataclass
class SamDecoderConfig:
    """The prompt encoder's and mask decoder's sizes (``hidden_size``: the image embedding's channels)."""

    hidden_size: int
    num_pos_feats: int
    input_image_size: int  # prompt coordinates are in pixels of this square
    embedding_size: int  # the image embedding's grid side
    num_hidden_layers: int
    num_attention_heads: int
    mlp_dim: int
    hidden_act: str
    layer_norm_eps: float
    attention_downsample_rate: int
    num_multimask_outputs: int
    iou_head_depth: int
    iou_head_hidden_dim: int
    # the mask prompt's encoder (the prompt encoder config's mask_input_channels, act, eps)
    mask_input_channels: int
    mask_hidden_act: str
    mask_layer_norm_eps: float

    @classmethod
    def from_hf(cls, hf: Any) -> SamDecoderConfig:
        prompt, decoder = hf.prompt_encoder_config, hf.mask_decoder_config
        config = cls(
            hidden_size=int(decoder.hidden_size),
            num_pos_feats=int(hf.vision_config.num_pos_feats),
            input_image_size=int(prompt.image_size),
            embedding_size=int(prompt.image_embedding_size),
            num_hidden_layers=int(decoder.num_hidden_layers),
            num_attention_heads=int(decoder.num_attention_heads),
            mlp_dim=int(decoder.mlp_dim),
            hidden_act=str(decoder.hidden_act),
            layer_norm_eps=float(decoder.layer_norm_eps),
            attention_downsample_rate=int(decoder.attention_downsample_rate),
            num_multimask_outputs=int(decoder.num_multimask_outputs),
            iou_head_depth=int(decoder.iou_head_depth),
            iou_head_hidden_dim=int(decoder.iou_head_hidden_dim),
            **mask_prompt_settings(prompt),
        )
        config.check(hf.model_type)
        return config

    def check(self, model_type: str) -> None:
        """Refuse sizes transformers' modules could not run either, by name."""
        sizes = {k: v for k, v in vars(self).items() if isinstance(v, int)}
        bad = [name for name, value in sizes.items() if value < 1]
        if bad:
            raise ConfigError(f"{model_type}: {', '.join(bad)} must be positive")
        c = self.hidden_size
        if 2 * self.num_pos_feats != c:
            raise ConfigError(
                f"{model_type}: the positional encoding's width (2 * num_pos_feats = "
                f"{2 * self.num_pos_feats}) is not the mask decoder's hidden_size {c}"
            )
        if c % 8 or (c // self.attention_downsample_rate) % self.num_attention_heads:
            raise ConfigError(
                f"{model_type}: mask decoder hidden_size {c} is not a multiple of 8 with "
                "whole attention heads"
            )
        if self.iou_head_depth < 2 or self.num_multimask_outputs < 1:
            raise ConfigError(f"{model_type}: iou_head_depth < 2 or no multimask output")
        # the first mask convolution has a quarter of the channels, the second all of them
        if self.mask_input_channels % 4:
            raise ConfigError(
                f"{model_type}: mask_input_channels {self.mask_input_channels} is not a "
                "multiple of 4"
            )
        try:
            get_activation(self.mask_hidden_act)
        except ValueError as error:
            raise ConfigError(f"{model_type}: prompt encoder hidden_act: {error}") from None

    @property
    def num_mask_tokens(self) -> int:
        return self.num_multimask_outputs + 1


def mask_prompt_settings(prompt_config: Any) -> dict:
    """The mask prompt encoder's fields of :class:`SamDecoderConfig` from transformers'
    prompt encoder config (SAM's, SAM-HQ's and SAM 2's have the same three)."""
    return dict(
        mask_input_channels=int(prompt_config.mask_input_channels),
        mask_hidden_act=str(prompt_config.hidden_act),
        mask_layer_norm_eps=float(prompt_config.layer_norm_eps),
    )


def per_prompt(op, x, prompt_shape):
    """``x [b, ...]`` repeated for each prompt of its image: ``[b * pb, ...]``, as
    transformers' ``repeat_interleave(point_batch, 0)``."""
    rest = op.Shape(x, start=1)
    repeated = op.Expand(op.Unsqueeze(x, [1]), op.Concat(prompt_shape, rest, axis=0))
    return op.Reshape(repeated, op.Concat(op.Constant(value_ints=[-1]), rest, axis=0))


class SamPositionalEmbedding(nn.Module):
    """Random Fourier features of ``[..., 2]`` coordinates in ``[0, 1]``: sin and cos."""

    def __init__(self, num_pos_feats: int) -> None:
        super().__init__()
        self.positional_embedding = nn.Parameter([2, num_pos_feats])

    def forward(self, op, coordinates):
        centred = op.Sub(op.Mul(coordinates, 2.0), 1.0)
        angles = op.Mul(op.MatMul(centred, self.positional_embedding), float(2 * np.pi))
        return op.Concat(op.Sin(angles), op.Cos(angles), axis=-1)


def image_grid_coordinates(size: int) -> np.ndarray:
    """``[size * size, 2]`` cell centres ``(x, y) / size`` in row-major order, float32 as
    transformers computes them (a cumulative sum of ones, less a half, over the size)."""
    centres = (np.arange(1, size + 1, dtype=np.float32) - np.float32(0.5)) / np.float32(size)
    y, x = np.meshgrid(centres, centres, indexing="ij")
    return np.stack([x, y], axis=-1).reshape(-1, 2).astype(np.float32)


def table_rows(op, table: Embedding, count: int = 1):
    """The first ``count`` rows of an embedding table, ``[count, dim]`` (looked up, so that
    the table is a parameter of the graph under its own name)."""
    return table(op, op.Constant(value_ints=list(range(count))))


def normalised_coordinates(op, coordinates, image_size: int):
    """Pixel coordinates of the ``image_size`` square to ``[0, 1]``, at the pixel's centre."""
    return op.Div(op.Add(coordinates, 0.5), float(image_size))


class SamMaskEmbedding(nn.Module):
    """A low-resolution mask ``[b, 1, 4h, 4w]`` to a dense prompt ``[b, C, h, w]``."""

    def __init__(self, config: SamDecoderConfig) -> None:
        super().__init__()
        channels, quarter = config.mask_input_channels, config.mask_input_channels // 4
        eps = config.mask_layer_norm_eps
        self.conv1 = Conv2d(1, quarter, 2, stride=2)
        self.layer_norm1 = ChannelsLayerNorm(quarter, eps)
        self.conv2 = Conv2d(quarter, channels, 2, stride=2)
        self.layer_norm2 = ChannelsLayerNorm(channels, eps)
        self.conv3 = Conv2d(channels, config.hidden_size, 1)
        self.act = get_activation(config.mask_hidden_act)

    def forward(self, op, masks):
        x = self.act(op, self.layer_norm1(op, self.conv1(op, masks)))
        x = self.act(op, self.layer_norm2(op, self.conv2(op, x)))
        return self.conv3(op, x)


class SamPromptEncoder(nn.Module):
    """Encoded points (with labels) and box corners to sparse prompt tokens ``[b, pb, T, C]``,
    and a mask (or none) to the dense prompt.

    The coordinates arrive encoded by the model's shared Fourier embedding
    (``shared_image_embedding``, a parameter of the model, not of this module).
    """

    def __init__(self, config: SamDecoderConfig) -> None:
        super().__init__()
        c = config.hidden_size
        self.mask_embed = SamMaskEmbedding(config)
        self.no_mask_embed = Embedding(1, c)
        self.point_embed = nn.ModuleList([Embedding(1, c) for _ in range(4)])
        self.not_a_point_embed = Embedding(1, c)
        self.hidden_size = c

    def embed_points(self, op, encoded, labels):
        """``encoded [b, pb, n, C]``: each point's label embedding added (module docstring)."""
        labels = op.Unsqueeze(labels, [-1])
        is_label = [op.Equal(labels, op.Constant(value_int=value)) for value in (-1, -10, 0, 1)]
        encoded = op.Where(is_label[0], table_rows(op, self.not_a_point_embed), encoded)
        encoded = op.Where(is_label[1], op.CastLike(0.0, encoded), encoded)
        for label, table in (
            (is_label[2], self.point_embed[0]),
            (is_label[3], self.point_embed[1]),
        ):
            encoded = op.Where(label, op.Add(encoded, table_rows(op, table)), encoded)
        return encoded

    def embed_boxes(self, op, encoded_corners, point_batch):
        """``[b, boxes, 2, C]`` to ``[b, point_batch, 2 * (boxes > 0), C]``: no box, no token."""
        corner_tables = op.Concat(
            table_rows(op, self.point_embed[2]), table_rows(op, self.point_embed[3]), axis=0
        )
        embedded = op.Add(encoded_corners, corner_tables)
        shape = op.Concat(
            op.Constant(value_ints=[0]),
            point_batch,
            op.Constant(value_ints=[-1, self.hidden_size]),
            axis=0,
        )
        return op.Reshape(embedded, shape)

    def embed_mask(self, op, masks, has_mask):
        """The dense prompt ``[b, C, h, w]``: each image's ``masks`` row through ``mask_embed``
        where its ``has_mask`` flag is nonzero, else ``no_mask_embed`` (transformers' choice
        between ``input_masks`` and none, made per image so that one graph does both)."""
        no_mask = op.Reshape(
            table_rows(op, self.no_mask_embed), op.Constant(value_ints=[1, -1, 1, 1])
        )
        use_mask = op.Unsqueeze(op.Cast(has_mask, to=ir.DataType.BOOL), [1, 2, 3])
        return op.Where(use_mask, self.mask_embed(op, masks), no_mask)

    def forward(self, op, points, encoded_points, labels, boxes, encoded_corners, masks, has_mask):
        """``(sparse, dense)``: the sparse tokens (the points, one padding point when there is
        no box, the corners) and the dense prompt (:meth:`embed_mask`).

        ``input_boxes`` has ``point_batch`` boxes (one per prompt) or none; with boxes and
        no points, ``input_points`` has no point (``[b, boxes, 0, 2]``).
        """
        batch, point_batch = op.Shape(points, start=0, end=1), op.Shape(points, start=1, end=2)
        box_count = op.Shape(boxes, start=1, end=2)
        # transformers pads with one point labelled -1 (not_a_point) when no box is given
        one = op.Constant(value_ints=[1])
        pads = op.Sub(one, op.Min(box_count, one))
        width = op.Constant(value_ints=[self.hidden_size])
        padding = op.Expand(
            table_rows(op, self.not_a_point_embed),
            op.Concat(batch, point_batch, pads, width, axis=0),
        )
        sparse = op.Concat(
            self.embed_points(op, encoded_points, labels),
            padding,
            self.embed_boxes(op, encoded_corners, point_batch),
            axis=2,
        )
        return sparse, self.embed_mask(op, masks, has_mask)


class SamAttention(nn.Module):
    """Multi-head attention whose projections narrow to ``hidden / downsample_rate``."""

    def __init__(self, config: SamDecoderConfig, downsample_rate: int) -> None:
        super().__init__()
        c, inner = config.hidden_size, config.hidden_size // downsample_rate
        self.q_proj, self.k_proj = Linear(c, inner, bias=True), Linear(c, inner, bias=True)
        self.v_proj, self.out_proj = Linear(c, inner, bias=True), Linear(inner, c, bias=True)
        self.heads = config.num_attention_heads
        self.head_dim = inner // self.heads
        self.inner = inner

    def _heads(self, op, x):
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])  # [n, heads, tokens, head_dim]

    def forward(self, op, query, key, value):
        """``[n, tokens, C]`` each; the query's tokens attend to the key's."""
        q = self._heads(op, self.q_proj(op, query))
        k = self._heads(op, self.k_proj(op, key))
        v = self._heads(op, self.v_proj(op, value))
        scores = op.Mul(op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])), self.head_dim**-0.5)
        y = op.MatMul(op.Softmax(scores, axis=-1), v)
        y = op.Reshape(
            op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, self.inner])
        )
        return self.out_proj(op, y)


class SamTwoWayAttentionBlock(nn.Module):
    """Tokens attend to themselves and to the image, an MLP, then the image to the tokens."""

    def __init__(self, config: SamDecoderConfig, skip_first_layer_pe: bool) -> None:
        super().__init__()
        c, eps, rate = config.hidden_size, config.layer_norm_eps, config.attention_downsample_rate
        self.self_attn = SamAttention(config, 1)
        self.layer_norm1 = LayerNorm(c, eps)
        self.cross_attn_token_to_image = SamAttention(config, rate)
        self.layer_norm2 = LayerNorm(c, eps)
        self.mlp = GotOcr2MLPBlock(config)  # lin1, act, lin2: the same block
        self.layer_norm3 = LayerNorm(c, eps)
        self.layer_norm4 = LayerNorm(c, eps)
        self.cross_attn_image_to_token = SamAttention(config, rate)
        self.skip_first_layer_pe = skip_first_layer_pe

    def forward(self, op, queries, keys, query_pe, key_pe):
        if self.skip_first_layer_pe:  # the first layer's attention replaces the tokens
            queries = self.self_attn(op, queries, queries, queries)
        else:
            query = op.Add(queries, query_pe)
            queries = op.Add(queries, self.self_attn(op, query, query, queries))
        queries = self.layer_norm1(op, queries)
        query, key = op.Add(queries, query_pe), op.Add(keys, key_pe)
        queries = self.layer_norm2(
            op, op.Add(queries, self.cross_attn_token_to_image(op, query, key, keys))
        )
        queries = self.layer_norm3(op, op.Add(queries, self.mlp(op, queries)))
        query, key = op.Add(queries, query_pe), op.Add(keys, key_pe)
        keys = self.layer_norm4(
            op, op.Add(keys, self.cross_attn_image_to_token(op, key, query, queries))
        )
        return queries, keys


class SamTwoWayTransformer(nn.Module):
    def __init__(self, config: SamDecoderConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [SamTwoWayAttentionBlock(config, i == 0) for i in range(config.num_hidden_layers)]
        )
        self.final_attn_token_to_image = SamAttention(config, config.attention_downsample_rate)
        self.layer_norm_final_attn = LayerNorm(config.hidden_size, TORCH_LAYER_NORM_EPS)

    def forward(self, op, tokens, image, image_pe):
        """``tokens [n, T, C]``, ``image [n, hw, C]``, ``image_pe [1, hw, C]``."""
        queries, keys = tokens, image
        for layer in self.layers:
            queries, keys = layer(op, queries, keys, tokens, image_pe)
        query, key = op.Add(queries, tokens), op.Add(keys, image_pe)
        queries = op.Add(queries, self.final_attn_token_to_image(op, query, key, keys))
        return self.layer_norm_final_attn(op, queries), keys


class SamFeedForward(nn.Module):
    """``proj_in``, ``layers`` and ``proj_out`` with ReLU between (no sigmoid in SAM)."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int) -> None:
        super().__init__()
        self.proj_in = Linear(input_dim, hidden_dim, bias=True)
        self.layers = nn.ModuleList(
            [Linear(hidden_dim, hidden_dim, bias=True) for _ in range(num_layers - 2)]
        )
        self.proj_out = Linear(hidden_dim, output_dim, bias=True)

    def forward(self, op, x):
        x = op.Relu(self.proj_in(op, x))
        for layer in self.layers:
            x = op.Relu(layer(op, x))
        return self.proj_out(op, x)


class ConvTranspose2x2(nn.Module):
    """``nn.ConvTranspose2d(kernel_size=2, stride=2)``: each cell to a 2x2 block."""

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter([in_channels, out_channels, 2, 2])
        self.bias = nn.Parameter([out_channels]) if bias else None

    def forward(self, op, x):
        return op.ConvTranspose(x, self.weight, self.bias, kernel_shape=[2, 2], strides=[2, 2])


class SamMaskDecoder(nn.Module):
    """Image embedding and prompt tokens to low-resolution masks and their IoU estimates."""

    def __init__(self, config: SamDecoderConfig) -> None:
        super().__init__()
        c, masks = config.hidden_size, config.num_mask_tokens
        self.iou_token = Embedding(1, c)
        self.mask_tokens = Embedding(masks, c)
        self.transformer = SamTwoWayTransformer(config)
        self.upscale_conv1 = ConvTranspose2x2(c, c // 4)
        self.upscale_conv2 = ConvTranspose2x2(c // 4, c // 8)
        self.upscale_layer_norm = ChannelsLayerNorm(c // 4, 1e-6)
        self.output_hypernetworks_mlps = nn.ModuleList(
            [SamFeedForward(c, c, c // 8, 3) for _ in range(masks)]
        )
        self.iou_prediction_head = SamFeedForward(
            c, config.iou_head_hidden_dim, masks, config.iou_head_depth
        )
        self.hidden_size, self.size, self.num_mask_tokens = c, config.embedding_size, masks

    def output_tokens(self, op, sparse):
        """The IoU and mask tokens before the prompt's: ``[b, pb, 1 + masks + prompt, C]``."""
        tokens = op.Concat(
            table_rows(op, self.iou_token),
            table_rows(op, self.mask_tokens, self.num_mask_tokens),
            axis=0,
        )
        shape = op.Concat(op.Shape(sparse, start=0, end=2), op.Shape(tokens), axis=0)
        return op.Concat(op.Expand(tokens, shape), sparse, axis=2)

    def grid(self, op, image):
        """The transformer's image tokens ``[n, hw, C]`` as ``[n, C, h, w]``."""
        s, c = self.size, self.hidden_size
        return op.Reshape(
            op.Transpose(image, perm=[0, 2, 1]), op.Constant(value_ints=[-1, c, s, s])
        )

    def upscaled(self, op, x):
        """``[n, C, h, w]`` to ``[n, C / 8, 16 hw]``: the image 4x larger, C / 8 channels."""
        c = self.hidden_size
        x = op.Gelu(self.upscale_layer_norm(op, self.upscale_conv1(op, x)))
        x = op.Gelu(self.upscale_conv2(op, x))
        return op.Reshape(x, op.Constant(value_ints=[0, c // 8, -1]))

    def forward(self, op, image_embeddings, image_pe, dense, sparse, *image_extras):
        """``(masks [b, pb, masks, 4h, 4w], iou [b, pb, iou], *extras [b, pb, k])``, every
        mask token's; ``extras``: what a variant's :meth:`predict` returns beside them.

        ``image_embeddings [b, C, h, w]`` plus the ``dense`` prompt; ``sparse [b, pb, T, C]``;
        ``image_pe [1, hw, C]``; ``image_extras``: what a variant's :meth:`predict` reads
        per image beside the embeddings.
        """
        s = self.size
        tokens = self.output_tokens(op, sparse)
        prompt_shape = op.Shape(tokens, start=0, end=2)  # [b, pb]
        rows = op.Concat(op.Constant(value_ints=[-1]), op.Shape(tokens, start=2), axis=0)
        tokens = op.Reshape(tokens, rows)  # [b * pb, T, C]
        image = per_prompt(op, op.Add(image_embeddings, dense), prompt_shape)  # [n, C, h, w]
        rows = op.Reshape(image, op.Constant(value_ints=[0, self.hidden_size, s * s]))
        queries, keys = self.transformer(op, tokens, op.Transpose(rows, perm=[0, 2, 1]), image_pe)
        masks, *per_token = self.predict(
            op, queries, keys, image, prompt_shape, image_embeddings, *image_extras
        )
        mask_shape = op.Concat(prompt_shape, op.Constant(value_ints=[-1, 4 * s, 4 * s]), axis=0)
        row_shape = op.Concat(prompt_shape, op.Constant(value_ints=[-1]), axis=0)
        return op.Reshape(masks, mask_shape), *(op.Reshape(x, row_shape) for x in per_token)

    def token(self, op, queries, index: int):
        """The transformer's output at token ``index``: ``[n, C]``."""
        return op.Gather(queries, op.Constant(value_int=index), axis=1)

    def hypernetwork(self, op, queries):
        """``[n, mask tokens, C / 8]``: each mask token through its own MLP."""
        return op.Concat(
            *[
                op.Unsqueeze(mlp(op, self.token(op, queries, i + 1)), [1])
                for i, mlp in enumerate(self.output_hypernetworks_mlps)
            ],
            axis=1,
        )

    def predict(self, op, queries, keys, image, prompt_shape, image_embeddings):
        """``(masks [n, mask tokens, 16 hw], iou [n, mask tokens])`` from the transformer's
        outputs ``queries`` and ``keys`` (SAM reads nothing else; a variant may read its
        input ``image`` ``[n, C, h, w]`` or the image's own features)."""
        iou = self.iou_prediction_head(op, self.token(op, queries, 0))
        upscaled = self.upscaled(op, self.grid(op, keys))
        return op.MatMul(self.hypernetwork(op, queries), upscaled), iou

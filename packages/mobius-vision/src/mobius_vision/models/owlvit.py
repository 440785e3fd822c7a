"""OWL-ViT: open-vocabulary object detection from CLIP's two towers (zero-shot-object-detection).

The towers are CLIP's (:mod:`mobius_vision.models.clip`), under the checkpoint's
``owlvit.*``; the text tower pools the state at each row's largest id (the end token), as
transformers' ``OwlViTTextTransformer`` always does. Every patch of the vision tower's
last state (``post_layernorm`` on all of it) is multiplied by the class token and
normed (``layer_norm``); ``class_head`` scores it against each query and ``box_head``
predicts its box, biased towards the patch's place on the grid. The graphs are the
contract's (:mod:`mobius_vision.tasks.zero_shot_detection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation, module_scope
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models.clip_text import CLIPTextTransformer, gather_rows
from mobius_vision.models.clip import CLIPConfig, l2_normalize
from mobius_vision.models.clip_vision import CLIPVisionTransformer

#: transformers' epsilon of the class head's normalisation (``x / (||x|| + 1e-6)``).
_CLASS_NORM_EPS = 1e-6
#: transformers' epsilon of the box bias (``log(x + 1e-4) - log1p(-x + 1e-4)``).
_BOX_BIAS_EPS = 1e-4


@dataclass
class OwlViTConfig(CLIPConfig):
    """CLIP's two tower configs; ``image_size`` fixes the patch grid the box bias is made for."""

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        text_width, dim = fields["text"].hidden_size, fields["projection_dim"]
        if text_width != dim:  # the class head maps patches to the text width, queries are dim
            raise ConfigError(
                f"{hf_config.model_type}: the text tower's hidden_size ({text_width}) must equal "
                f"projection_dim ({dim}); the class head compares them"
            )
        return fields

    @property
    def patch_grid(self) -> tuple[int, int]:
        """``(patches_high, patches_wide)``."""
        height, width = self.image_size
        return height // self.vision.patch_size, width // self.vision.patch_size


class OwlViTTextTransformer(CLIPTextTransformer):
    """CLIP's text tower, pooled at each row's largest id whatever the config's end token."""

    def pool(self, op, hidden, input_ids):
        ids = op.Cast(input_ids, to=ir.DataType.INT32)  # ArgMax takes the first maximum, as torch
        return gather_rows(op, hidden, op.ArgMax(ids, axis=-1, keepdims=0))


class OwlViTDualEncoder(nn.Module):
    """``owlvit``: the towers and the text projection (the detector reads no pooled image
    embedding, nor ``logit_scale``)."""

    def __init__(self, config: OwlViTConfig) -> None:
        super().__init__()
        self.text_model = OwlViTTextTransformer(config.text)
        self.vision_model = CLIPVisionTransformer(config.vision)
        self.text_projection = Linear(config.text.hidden_size, config.projection_dim, bias=False)


class BoxPredictionHead(nn.Module):
    """``dense2(gelu(dense1(gelu(dense0(x)))))`` (``out_dim`` 4: a box; OWLv2's objectness: 1)."""

    def __init__(self, width: int, out_dim: int = 4) -> None:
        super().__init__()
        self.dense0 = Linear(width, width, bias=True)
        self.dense1 = Linear(width, width, bias=True)
        self.dense2 = Linear(width, out_dim, bias=True)
        self.gelu = get_activation("gelu")

    def forward(self, op, x):
        x = self.gelu(op, self.dense0(op, x))
        return self.dense2(op, self.gelu(op, self.dense1(op, x)))


class ClassPredictionHead(nn.Module):
    """Each patch's class embedding against each query, shifted and scaled per patch."""

    def __init__(self, query_dim: int, out_dim: int) -> None:
        super().__init__()
        self.dense0 = Linear(query_dim, out_dim, bias=True)
        self.logit_shift = Linear(query_dim, 1, bias=True)
        self.logit_scale = Linear(query_dim, 1, bias=True)

    def forward(self, op, image_feats, query_embeds):
        """``(logits [batch, patches, texts], class_embeds [batch, patches, dim])``."""
        class_embeds = _normalize(op, self.dense0(op, image_feats))
        queries = _normalize(op, query_embeds)  # [texts, dim]
        logits = op.MatMul(class_embeds, op.Transpose(queries, perm=[1, 0]))
        shift = self.logit_shift(op, image_feats)  # [batch, patches, 1]
        scale = op.Add(op.Elu(self.logit_scale(op, image_feats)), op.CastLike(1.0, image_feats))
        return op.Mul(op.Add(logits, shift), scale), class_embeds


def _normalize(op, x):
    """``x / (||x|| + 1e-6)`` over the last axis, as the class head normalises."""
    norm = op.ReduceL2(x, [-1], keepdims=1)
    return op.Div(x, op.Add(norm, op.CastLike(_CLASS_NORM_EPS, x)))


def box_bias(patches_high: int, patches_wide: int) -> np.ndarray:
    """``[patches, 4]`` logits of each patch's corner on the grid and of one patch's size,
    as transformers' ``compute_box_bias`` makes them (float32)."""
    xs = np.arange(1, patches_wide + 1, dtype=np.float32) / np.float32(patches_wide)
    ys = np.arange(1, patches_high + 1, dtype=np.float32) / np.float32(patches_high)
    xx, yy = np.meshgrid(xs, ys, indexing="xy")  # [high, wide], rows of patches
    corners = np.clip(np.stack([xx, yy], axis=-1).reshape(-1, 2), 0.0, 1.0)
    size = np.broadcast_to(
        np.array([1.0 / patches_wide, 1.0 / patches_high], np.float32), corners.shape
    )
    eps = np.float32(_BOX_BIAS_EPS)

    def logit(x):
        return np.log(x + eps) - np.log1p(-x + eps)

    return np.concatenate([logit(corners), logit(size)], axis=-1).astype(np.float32)


class OwlViTForObjectDetection(Model):
    """``owlvit``, ``class_head``, ``box_head`` and ``layer_norm``, as the checkpoint names them."""

    config_class = OwlViTConfig
    task = "zero-shot-object-detection"
    #: The checkpoint's name of the towers' module.
    towers_name = "owlvit"

    def __init__(self, config: OwlViTConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.vision.hidden_size
        setattr(self, self.towers_name, OwlViTDualEncoder(config))
        self.class_head = ClassPredictionHead(hidden, config.text.hidden_size)
        self.box_head = BoxPredictionHead(hidden)
        self.layer_norm = LayerNorm(hidden, config.vision.layer_norm_eps)

    @property
    def towers(self) -> OwlViTDualEncoder:
        return getattr(self, self.towers_name)

    def embed_texts(self, op, input_ids, attention_mask):
        """``text_embeds [texts, projection_dim]``, L2-normalised."""
        with module_scope(op, self.towers):
            _, pooled = self.towers.text_model(op, input_ids, attention_mask)
            return l2_normalize(op, self.towers.text_projection(op, pooled))

    def image_feats(self, op, pixel_values):
        """``[batch, patches, hidden]``: each patch's state times the class token's, normed."""
        vision = self.towers.vision_model
        with module_scope(op, self.towers, vision):
            x = vision.post_layernorm(op, vision.hidden_states(op, pixel_values)[-1])
        cls = op.Slice(x, [0], [1], [1])  # [batch, 1, hidden]
        patches = op.Slice(x, [1], [2**62], [1])
        return self.layer_norm(op, op.Mul(patches, cls))

    def detect(self, op, pixel_values, text_embeds) -> dict:
        """The image graph's outputs (:meth:`image_outputs`)."""
        return self.heads(op, self.image_feats(op, pixel_values), text_embeds)

    def heads(self, op, feats, text_embeds) -> dict:
        """The image graph's outputs from the patch features ``[batch, patches, hidden]``."""
        logits, class_embeds = self.class_head(op, feats, text_embeds)
        high, wide = self.config.patch_grid
        boxes = self.box_head(op, feats)
        bias = op.CastLike(op.Constant(value=ir.tensor(box_bias(high, wide))), boxes)
        boxes = op.Add(boxes, bias)
        grid = op.Constant(value_ints=[0, high, wide, self.config.vision.hidden_size])
        return dict(
            logits=logits,
            pred_boxes=op.Sigmoid(boxes),
            class_embeds=class_embeds,
            image_embeds=op.Reshape(feats, grid),
        )

    def image_outputs(self) -> dict[str, list]:
        """The image graph's outputs and their shapes."""
        high, wide = self.config.patch_grid
        patches = high * wide
        return {
            "logits": ["batch", patches, "texts"],
            "pred_boxes": ["batch", patches, 4],
            "class_embeds": ["batch", patches, self.config.text.hidden_size],
            "image_embeds": ["batch", high, wide, self.config.vision.hidden_size],
        }

    @property
    def ignored(self) -> tuple[str, ...]:
        """The contrastive ``logit_scale`` and the pooled image projection the detector does
        not read, and the position-id buffers older checkpoints saved."""
        name = self.towers_name
        return (
            f"{name}.logit_scale",
            f"{name}.visual_projection.*",
            f"{name}.*.embeddings.position_ids",
        )

    def sanitize(self, weights: dict) -> dict:
        """transformers' ``pre_layernorm`` is CLIP's ``pre_layrnorm`` here."""
        old = f"{self.towers_name}.vision_model.pre_layernorm."
        new = f"{self.towers_name}.vision_model.pre_layrnorm."
        return {new + k[len(old) :] if k.startswith(old) else k: v for k, v in weights.items()}


MODEL_TYPES = {"owlvit": OwlViTForObjectDetection}

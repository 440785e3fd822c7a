"""CLAP: zero-shot audio classification from an HTSAT audio tower and a RoBERTa text tower.

The audio tower (HTSAT) is a Swin transformer over the log-mel spectrogram: the
features are normalised per mel bin (``batch_norm``, eval statistics), stretched
along time to ``spec_size * freq_ratio`` frames (bicubic, corners aligned, as
transformers does when the clip has fewer frames), folded into a square image of
``freq_ratio`` bands, cut into patches (``patch_embed``) and run through Swin stages;
the mean of the final tokens is projected. The Swin stages are the ones mobius-vision
registers for ``swin`` and the text tower's embeddings and layers mobius-text's
``roberta`` (found through the registry, so both towers reuse verified code); the
text pooler (``tanh(dense(first token))``) and the two projections
(``linear2(act(linear1(x)))``) are CLAP's own; the patch embeddings, with the feature
fusion of fused checkpoints, are in :mod:`._clap_patches`. Both embeddings are L2-normalised;
``logits_per_audio`` is scaled by ``exp(logit_scale_a)``, ``logits_per_text`` by
``exp(logit_scale_t)`` (two learned scales, unlike CLIP's one).

The module tree is the checkpoint's (``audio_model.audio_encoder.*``,
``text_model.*``, ``audio_projection.*``, ``text_projection.*``). Refused
(``ConfigError``): ``fusion_type="channel_map"`` (transformers cannot run it), a
``patch_stride`` other than ``patch_size``, and a ``spec_size`` that ``num_mel_bins``
does not divide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius import registry
from mobius.components import BatchNorm, LayerNorm, Linear, get_activation, padding_bias
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models._clap_patches import ClapFusedPatchEmbed, ClapPatchEmbed


def _registered(model_type: str, package: str):
    """The model class another domain package registers for ``model_type``."""
    try:
        return registry.get(model_type).module_class()
    except Exception as exc:  # the registry's own error names what is missing
        reason = " ".join(str(exc).split())
        raise ConfigError(
            f"CLAP builds on {package}'s {model_type} (pip install mobius-audio[clap]): {reason}"
        ) from None


def _pair(value: Any, name: str) -> tuple[int, int]:
    pair = tuple(value) if isinstance(value, (list, tuple)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ConfigError(
            f"clap: audio_config.{name} must be a positive int or pair, not {value!r}"
        )
    return pair


@dataclass
class ClapConfig:
    """Both towers: the text tower's RoBERTa config, the audio tower's Swin config and sizes."""

    model_type: str
    text: Any
    swin: Any
    num_mel_bins: int
    spec_size: int
    patch_size: int
    embed_dim: int
    patch_layer_norm: bool
    enable_fusion: bool
    aff_block_r: int
    audio_hidden_size: int
    projection_dim: int
    projection_act: str

    @classmethod
    def from_hf(cls, hf_config: Any) -> ClapConfig:
        audio = hf_config.audio_config
        fusion = bool(audio.enable_fusion)
        if fusion and audio.fusion_type == "channel_map":
            raise ConfigError(
                "clap: fusion_type 'channel_map' gives the patch conv four input channels that "
                "transformers' forward never feeds; it cannot run"
            )
        ratio = audio.aff_block_r
        if fusion and (isinstance(ratio, bool) or not isinstance(ratio, int) or ratio <= 0):
            raise ConfigError(f"clap: aff_block_r must be a positive int, not {ratio!r}")
        patch, stride = (
            _pair(audio.patch_size, "patch_size"),
            _pair(audio.patch_stride, "patch_stride"),
        )
        if patch != stride or patch[0] != patch[1]:
            raise ConfigError(f"clap: patch_size {patch} with patch_stride {stride} is not built")
        mels, spec = int(audio.num_mel_bins), int(audio.spec_size)
        if mels <= 0 or spec % mels or spec // mels <= 0:
            raise ConfigError(f"clap: spec_size {spec} is not a multiple of num_mel_bins {mels}")
        text = _registered("roberta", "mobius-text").config_class.from_hf(hf_config.text_config)
        swin = _registered("swin", "mobius-vision").config_class(
            model_type="clap_audio_model",
            image_size=(spec, spec),
            num_channels=1,
            patch_size=patch[0],
            embed_dim=int(audio.patch_embeds_hidden_size),
            depths=tuple(audio.depths),
            num_heads=tuple(audio.num_attention_heads),
            window_size=int(audio.window_size),
            mlp_ratio=float(audio.mlp_ratio),
            qkv_bias=bool(audio.qkv_bias),
            hidden_act=audio.hidden_act,
            layer_norm_eps=float(audio.layer_norm_eps),
        )
        if swin.num_features != audio.hidden_size:
            raise ConfigError(
                f"clap: audio hidden_size {audio.hidden_size} is not the last stage's width "
                f"{swin.num_features}"
            )
        return cls(
            model_type=hf_config.model_type,
            text=text,
            swin=swin,
            num_mel_bins=mels,
            spec_size=spec,
            patch_size=patch[0],
            embed_dim=swin.embed_dim,
            patch_layer_norm=bool(audio.enable_patch_layer_norm),
            enable_fusion=fusion,
            aff_block_r=int(ratio) if fusion else 4,
            audio_hidden_size=int(audio.hidden_size),
            projection_dim=int(hf_config.projection_dim),
            projection_act=hf_config.projection_hidden_act,
        )

    @property
    def freq_ratio(self) -> int:
        """How many bands of the spectrogram's time axis are stacked into the square image."""
        return self.spec_size // self.num_mel_bins

    @property
    def audio_channels(self) -> int:
        """Spectrograms per clip: the whole and three crops when fused, else one."""
        return 4 if self.enable_fusion else 1

    @property
    def max_frames(self) -> int:
        """The frames the tower takes: fewer are stretched to this, more cannot be run."""
        return self.spec_size * self.freq_ratio


class ClapAudioEncoder(nn.Module):
    """HTSAT: ``input_features`` [batch, 1, frames, mels] -> the mean final token [batch, C]."""

    def __init__(self, config: ClapConfig) -> None:
        super().__init__()
        self.config = config
        self.batch_norm = BatchNorm(config.num_mel_bins)
        patches = (config.embed_dim, config.patch_size, config.spec_size, config.patch_layer_norm)
        if config.enable_fusion:
            self.patch_embed = ClapFusedPatchEmbed(*patches, config.aff_block_r)
        else:
            self.patch_embed = ClapPatchEmbed(*patches)
        swin_encoder = _registered("swin", "mobius-vision").model_class.encoder_class
        self.layers = swin_encoder(config.swin).layers
        self.norm = LayerNorm(config.audio_hidden_size)

    def to_image(self, op, features):
        """Normalise per mel bin, stretch time to ``max_frames``, fold into ``[batch, channels, S, S]``."""
        c = self.config
        x = op.Transpose(features, perm=[0, 3, 2, 1])  # mel bins on axis 1, as BatchNorm2d reads
        x = op.Transpose(self.batch_norm(op, x), perm=[0, 3, 2, 1])  # [batch, ch, frames, mels]
        # Bicubic with aligned corners (torch's a = -0.75); identity when frames == max_frames.
        size = op.Concat(op.Shape(x, start=0, end=2), [c.max_frames, c.num_mel_bins], axis=0)
        x = op.Resize(
            x,
            None,
            None,
            size,
            mode="cubic",
            coordinate_transformation_mode="align_corners",
            cubic_coeff_a=-0.75,
        )
        r, mels, channels = c.freq_ratio, c.num_mel_bins, c.audio_channels
        x = op.Reshape(x, op.Constant(value_ints=[-1, channels * r, c.spec_size, mels]))
        x = op.Transpose(x, perm=[0, 1, 3, 2])  # [batch, channels * bands, mels, spec_size]
        return op.Reshape(x, op.Constant(value_ints=[-1, channels, r * mels, c.spec_size]))

    def forward(self, op, input_features, is_longer=None):
        x = self.patch_embed(op, self.to_image(op, input_features), is_longer)
        for stage in self.layers:
            x = stage(op, x)
        x = self.norm(op, x)
        # transformers regroups the tokens by band before its average pool: the mean is the same.
        return op.ReduceMean(x, op.Constant(value_ints=[1]), keepdims=0)


class ClapAudioModel(nn.Module):
    def __init__(self, config: ClapConfig) -> None:
        super().__init__()
        self.audio_encoder = ClapAudioEncoder(config)

    def forward(self, op, input_features, is_longer=None):
        return self.audio_encoder(op, input_features, is_longer)


class ClapTextPooler(nn.Module):
    """``tanh(dense(x[:, 0]))``."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = Linear(hidden_size, hidden_size, bias=True)

    def forward(self, op, x):
        first = op.Squeeze(op.Slice(x, [0], [1], [1]), [1])
        return op.Tanh(self.dense(op, first))


class ClapTextModel(nn.Module):
    """RoBERTa's embeddings (padding-aware positions) and layers, with CLAP's pooler."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        roberta = _registered("roberta", "mobius-text").model_class
        self.embeddings = roberta.embeddings_class(config)
        self.encoder = roberta.encoder_class(config)
        self.pooler = ClapTextPooler(config.hidden_size)

    def forward(self, op, input_ids, attention_mask):
        x = self.embeddings(op, input_ids, None)  # one token type: type 0's row for all
        x = self.encoder(op, x, padding_bias(op, attention_mask, x.dtype))
        return self.pooler(op, x)


class ClapProjectionLayer(nn.Module):
    def __init__(self, hidden_size: int, projection_dim: int, act: str) -> None:
        super().__init__()
        self.linear1 = Linear(hidden_size, projection_dim, bias=True)
        self.activation = get_activation(act)
        self.linear2 = Linear(projection_dim, projection_dim, bias=True)

    def forward(self, op, x):
        return self.linear2(op, self.activation(op, self.linear1(op, x)))


def l2_normalize(op, x):
    """``x / ||x||`` over the last axis (no epsilon, as transformers' ClapModel.forward)."""
    return op.Div(x, op.ReduceL2(x, [-1], keepdims=1))


class ClapModel(Model):
    """Both towers, both projections, ``logit_scale_a`` and ``logit_scale_t``."""

    config_class = ClapConfig
    task = "zero-shot-audio-classification"

    def __init__(self, config: ClapConfig) -> None:
        super().__init__()
        self.config = config
        dim, act = config.projection_dim, config.projection_act
        self.text_model = ClapTextModel(config.text)
        self.text_projection = ClapProjectionLayer(config.text.hidden_size, dim, act)
        self.audio_model = ClapAudioModel(config)
        self.audio_projection = ClapProjectionLayer(config.audio_hidden_size, dim, act)
        self.logit_scale_a = nn.Parameter([])
        self.logit_scale_t = nn.Parameter([])

    def forward(self, op, input_ids, attention_mask, input_features, is_longer=None):
        text = self.text_projection(op, self.text_model(op, input_ids, attention_mask))
        audio = self.audio_projection(op, self.audio_model(op, input_features, is_longer))
        text, audio = l2_normalize(op, text), l2_normalize(op, audio)
        similarity = op.MatMul(audio, op.Transpose(text, perm=[1, 0]))  # [audio_batch, text_batch]
        return dict(
            logits_per_audio=op.Mul(similarity, op.Exp(self.logit_scale_a)),
            logits_per_text=op.Transpose(
                op.Mul(similarity, op.Exp(self.logit_scale_t)), perm=[1, 0]
            ),
            text_embeds=text,
            audio_embeds=audio,
        )

    @property
    def ignored(self) -> tuple[str, ...]:
        """Buffers the checkpoint saves that are constants here."""
        return (
            "text_model.embeddings.position_ids",
            "text_model.embeddings.token_type_ids",
            "*.relative_position_index",
            "*.num_batches_tracked",
        )


MODEL_TYPES = {"clap": ClapModel}

"""Any causal LM's backbone as an embedder or a classifier: ``GPT2Model``, ``BloomForSequenceClassification``...

:mod:`~mobius_text.models.text_encoders` and :mod:`~mobius_text.models.decoder_classifiers`
rerun a Llama-shaped backbone piece by piece. The families that compute otherwise (GPT-2's
learned positions, BLOOM's ALiBi, hybrids with convolution states...) are built here from
their causal LM unchanged: the graph is the causal LM's prefill over an empty cache, and the
state its head reads is the output: in these families, what transformers' bare model
returns as ``last_hidden_state`` (MiniCPM 3 divides it on the way to its head:
``state_divided_by`` multiplies it back), computed by the family's own code, proven by its
causal-LM parity.

- ``<Family>Model`` (task ``text-encoder``): ``last_hidden_state``, with ``--head
  sentence-embedding`` the pooled embedding, with ``--score-tokens YES,NO`` a yes/no
  reranker (the head kept, ``logit(YES) - logit(NO)`` at the last real token).
- ``<Family>ForSequenceClassification`` (task ``text-classification``): ``score``, a Linear
  without bias, at the token transformers scores.

Positions count ``0..sequence-1`` on every row, as transformers' bare model does without
``position_ids``; ``positions_from_mask`` families (OPT) count the real tokens instead,
as their transformers class does. ``--hidden-states`` is not offered: only the head's input
is tapped.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, last_real_token
from mobius.errors import ConfigError
from mobius_text.models.decoder_classifiers import ClassifierFields, last_scored_token
from mobius_text.models.text_encoders import TextEncoderFields


class HeadInput(nn.Module):
    """Stands where the LM head was: passes the state it is given on (and it is kept)."""

    def forward(self, op, hidden):
        return hidden


def record_input(module: nn.Module, seen: list) -> None:
    """Make ``module`` append the first input of each call to ``seen``."""
    forward = module.forward

    def recording(op, hidden, *args, **kwargs):
        seen.append(hidden)
        return forward(op, hidden, *args, **kwargs)

    module.forward = recording


def empty_cache(op, layout: list[list[tuple[str, list]]], batch, dtype: ir.DataType) -> list:
    """The cache a prompt starts from: key/values of no positions, zero fixed-size states."""
    past = []
    for layer in layout:
        tensors = []
        for kind, shape in layer:
            dims = []
            for dim in shape:
                if dim == "batch":
                    dims.append(batch)
                elif dim == "past_sequence":
                    dims.append(op.Constant(value_ints=[0]))
                elif isinstance(dim, int):
                    dims.append(op.Constant(value_ints=[dim]))
                else:
                    raise ConfigError(f"cache dimension {dim!r} of {kind} has no start value")
            zero = ir.tensor(np.zeros(1, dtype=dtype.numpy()))
            tensors.append(op.ConstantOfShape(op.Concat(*dims, axis=0), value=zero))
        past.append(tuple(tensors))
    return past


class CausalBackbone:
    """Mixin before a causal LM class: its prefill over an empty cache, the head's input out.

    ``head_name`` is the attribute holding the LM head (``embed_out`` in GPT-NeoX). A bare
    model's checkpoint leaves out the prefix of the one other top-level module
    (``transformer``), which :meth:`sanitize` puts back.
    """

    task: ClassVar[str] = "text-encoder"
    positions_from_mask: ClassVar[bool] = False
    #: The config field the family divides the state by on its way to the head
    #: (MiniCPM 3's ``logits_scaling``): the tapped input is multiplied back.
    state_divided_by: ClassVar[str | None] = None
    #: Modules the head's output goes through on to the logits (the ModernBERT decoder's
    #: ``decoder`` after its prediction head ``lm_head``): dropped with the head.
    after_head: ClassVar[tuple[str, ...]] = ()

    @property
    def tapped_head(self) -> str:
        """The family's ``head_name`` where it declares one (``embed_out``), else ``lm_head``;
        a dotted one (Inkling 2's ``model.llm.unembed``) is a head inside the backbone."""
        return getattr(self, "head_name", "lm_head")

    def submodule(self, path: str):
        """The module at the dotted ``path`` (``model.llm.unembed``), None where there is none."""
        module = self
        for name in path.split("."):
            module = getattr(module, name, None)
        return module

    def replace_module(self, path: str, module: nn.Module) -> None:
        """Put ``module`` at the dotted ``path``."""
        holder, _, name = path.rpartition(".")
        setattr(self.submodule(holder) if holder else self, name, module)

    def __init__(self, config) -> None:
        super().__init__(config)
        if config.hidden_states:
            raise ConfigError(f"--hidden-states: {type(self).__name__} outputs the last state only")
        if not isinstance(self.submodule(self.tapped_head), nn.Module):
            raise TypeError(f"{type(self).__name__} has no LM head named {self.tapped_head!r}")
        self.keeps_head = bool(config.score_token_ids)  # a yes/no reranker reads the logits
        for name in self.dropped_modules():
            self.replace_module(name, HeadInput())
        self.head_inputs: list = []
        record_input(self.submodule(self.tapped_head), self.head_inputs)

    def dropped_modules(self) -> tuple[str, ...]:
        """The head and the modules after it (a bare checkpoint has none of them), each
        replaced by a pass-through; none where the head is kept."""
        return () if self.keeps_head else (self.tapped_head, *self.after_head)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The family's, and the dropped modules' tensors."""
        return (*super().ignored, *(f"{name}.*" for name in self.dropped_modules()))

    def output_shapes(self) -> dict[str, list]:
        return {}

    def prefill(self, op, input_ids, attention_mask):
        """``(state the head reads [batch, seq, hidden], logits [batch, seq, vocab])`` of the
        prompt; the logits are left unused (and pruned) unless the head is kept (a
        ``scored_head`` classifier gets its head's output there instead)."""
        shape = op.Shape(input_ids)  # [batch, seq]
        if self.positions_from_mask:  # real tokens count from 0; pads sit at 1, as the LM's
            counted = op.Sub(op.CumSum(attention_mask, op.Constant(value_int=1)), attention_mask)
            positions = op.Where(op.Cast(attention_mask, to=ir.DataType.BOOL), counted, 1)
        else:
            seq_len = op.Squeeze(op.Slice(shape, [1], [2]), [0])
            positions = op.Expand(op.Unsqueeze(op.Range(0, seq_len, 1), [0]), shape)
        past = empty_cache(op, self.cache_layout(), op.Slice(shape, [0], [1]), self.float_type())
        logits, _ = super().forward(op, input_ids, attention_mask, positions, past)
        hidden = self.head_inputs[-1]
        if self.state_divided_by:
            hidden = op.Mul(hidden, getattr(self.config, self.state_divided_by))
        return hidden, logits

    def float_type(self) -> ir.DataType:
        """The build's float type (the cache's zeros take it): the first float parameter's."""
        floats = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
        return next(p.dtype for p in self.parameters() if p.dtype in floats)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        hidden, logits = self.prefill(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        if self.keeps_head:  # a yes/no reranker
            last = last_real_token(op, logits, attention_mask)  # [batch, vocab]
            yes, no = (op.Gather(last, [i], axis=1) for i in self.config.score_token_ids)
            outputs["logits"] = op.Sub(yes, no)  # [batch, 1]
        return outputs

    def sanitize(self, weights: dict) -> dict:
        """A bare model's tensors (``h.0.*``) get the backbone's prefix (a dotted head's
        holder, ``model.llm``, where the head is inside it), then the family's rules."""
        heads = {self.tapped_head, "score", *self.after_head}
        top = heads | {name for name, _ in self.named_children()}
        if not any(name.split(".", 1)[0] in top for name in weights):
            backbones = [name for name, _ in self.named_children() if name not in heads]
            if "." in self.tapped_head:
                backbones = [self.tapped_head.rpartition(".")[0]]
            if len(backbones) != 1:
                raise ConfigError(f"{type(self).__name__}: no one backbone prefix among {top}")
            weights = {f"{backbones[0]}.{name}": tensor for name, tensor in weights.items()}
        return super().sanitize(weights)


class CausalClassifier(CausalBackbone):
    """Mixin before a causal LM class: ``score`` on the token transformers scores
    (``score_name``: the checkpoint's name of it, ``classifier`` in CTRL).

    ``scored_head``: where ``score`` reads the LM head's output rather than its input, the
    classifier checkpoint's name of that head (the ModernBERT decoder's prediction head,
    ``head``): it is kept, the modules after it dropped. ``score_bias``: the config field
    that gives ``score`` a bias (``classifier_bias``), if any.
    """

    task: ClassVar[str] = "text-classification"
    score_name: ClassVar[str] = "score"
    scored_head: ClassVar[str | None] = None
    score_bias: ClassVar[str | None] = None

    def __init__(self, config) -> None:
        super().__init__(config)
        bias = bool(getattr(config, self.score_bias)) if self.score_bias else False
        self.score = Linear(config.hidden_size, config.num_labels, bias=bias)

    def dropped_modules(self) -> tuple[str, ...]:
        return self.after_head if self.scored_head else super().dropped_modules()

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        hidden, head_out = self.prefill(op, input_ids, attention_mask)
        state = head_out if self.scored_head else hidden  # [batch, seq, hidden]
        scored = last_scored_token(op, state, input_ids, attention_mask, self.config.pad_token_id)
        return {"last_hidden_state": hidden, "logits": self.score(op, scored)}

    def sanitize(self, weights: dict) -> dict:
        renames = {f"{self.score_name}.": "score."}
        if self.scored_head:
            renames[f"{self.scored_head}."] = f"{self.tapped_head}."
        for name in list(weights):
            for old, new in renames.items():
                if name.startswith(old):
                    weights[new + name.removeprefix(old)] = weights.pop(name)
                    break
        return super().sanitize(weights)


def _config(causal_lm: type, name: str, *fields: type) -> type:
    bases = (*fields, TextEncoderFields, causal_lm.config_class)
    return dataclass(type(f"{name}Config", bases, {"__module__": __name__}))


def backbone_of(causal_lm: type, name: str, **attributes: Any) -> type:
    """``name`` (``GPT2Model``): ``causal_lm``'s head input as a text encoder."""
    body = dict(config_class=_config(causal_lm, name), __module__=__name__, **attributes)
    body["__doc__"] = f"{causal_lm.__name__}'s prefill, its head's input out."
    return type(name, (CausalBackbone, causal_lm), body)


def classifier_of(causal_lm: type, name: str, **attributes: Any) -> type:
    """``name`` (``GPT2ForSequenceClassification``): ``causal_lm`` with ``score``."""
    config = _config(causal_lm, name, ClassifierFields)
    body = dict(config_class=config, __module__=__name__, **attributes)
    body["__doc__"] = f"{causal_lm.__name__}'s prefill with ``score``."
    return type(name, (CausalClassifier, causal_lm), body)


# transformers' bare model classes built here (``text-encoder``), each from the causal LM of
# the model_type beside it; every one has a parity case (tests/text_encoder_parity_cases.py).
EMBEDDERS: dict[str, str] = {
    "AXK1Model": "axk1",
    "AXK2Model": "axk2",
    "AfmoeModel": "afmoe",
    "Apertus1p5TextModel": "apertus1p5_text",
    "ApertusModel": "apertus",
    "ArceeModel": "arcee",
    "AriaTextModel": "aria_text",
    "BailingHybridModel": "bailing_hybrid",
    "BambaModel": "bamba",
    "BeamModel": "beam",
    "BioGptModel": "biogpt",
    "BitNetModel": "bitnet",
    "BloomModel": "bloom",
    "CTRLModel": "ctrl",
    "CodeGenModel": "codegen",
    "Cohere2Model": "cohere2",
    "Cohere2MoeModel": "cohere2_moe",
    "CohereCompassTextModel": "cohere_compass_text",
    "CohereModel": "cohere",
    "CpmAntModel": "cpmant",
    "CwmModel": "cwm",
    "DbrxModel": "dbrx",
    "DeepseekV2Model": "deepseek_v2",
    "DeepseekV32Model": "deepseek_v32",
    "DeepseekV3Model": "deepseek_v3",
    "DeepseekV4Model": "deepseek_v4",
    "DiffLlamaModel": "diffllama",
    "DogeModel": "doge",
    "DoryModel": "dory",
    "Dots1Model": "dots1",
    "Dots3NoteTextModel": "dots3_note_text",
    "Ernie4_5Model": "ernie4_5",
    "Ernie4_5_MoeModel": "ernie4_5_moe",
    "Exaone4Model": "exaone4",
    "ExaoneMoeModel": "exaone_moe",
    "FalconH1Model": "falcon_h1",
    "FalconMambaModel": "falcon_mamba",
    "FalconModel": "falcon",
    "FlexOlmoModel": "flex_olmo",
    "FlintModel": "flint",
    "GPT2Model": "gpt-sw3",
    "GPTBigCodeModel": "gpt_bigcode",
    "GPTJModel": "gptj",
    "GPTNeoModel": "gpt_neo",
    "GPTNeoXJapaneseModel": "gpt_neox_japanese",
    "GPTNeoXModel": "gpt_neox",
    "Gemma3TextModel": "gemma3_text",
    "Gemma3nTextModel": "gemma3n_text",
    "Gemma4TextModel": "gemma4_text",
    "Gemma4UnifiedTextModel": "gemma4_unified_text",
    "GemmaModel": "gemma",
    "Glm4Model": "glm4",
    "Glm4MoeLiteModel": "glm4_moe_lite",
    "Glm4MoeModel": "glm4_moe",
    "GlmMoeDsaModel": "glm_moe_dsa",
    "GptOssModel": "gpt_oss",
    "GraniteModel": "granite",
    "GraniteMoeHybridModel": "granitemoehybrid",
    "GraniteMoeModel": "granitemoe",
    "GraniteMoeSWAModel": "granitemoe_swa",
    "GraniteMoeSharedModel": "granitemoeshared",
    "GraniteSWAModel": "granite_swa",
    "HYV3Model": "hy_v3",
    "HYV4Model": "hy_v4",
    "HeliumModel": "helium",
    "HrmTextModel": "hrm_text",
    "HunYuanDenseV1Model": "hunyuan_v1_dense",
    "HunYuanMoEV1Model": "hunyuan_v1_moe",
    "HyperCLOVAXModel": "hyperclovax",
    "Inkling2LoopTextModel": "inkling2_loop_text",
    "Inkling2TextModel": "inkling2_text",
    "InklingTextModel": "inkling_text",
    "Jais2Model": "jais2",
    "JambaModel": "jamba",
    "JetMoeModel": "jetmoe",
    "KimiLinearModel": "kimi_linear",
    "Kolibri1Model": "kolibri1",
    "LagunaModel": "laguna",
    "LaraMiniModel": "lara_mini",
    "Lfm2Model": "lfm2",
    "Lfm2MoeModel": "lfm2_moe",
    "Lfm3Model": "lfm3",
    "Llama4TextModel": "llama4_text",
    "LongcatFlashModel": "longcat_flash",
    "Mamba2Model": "mamba2",
    "MambaModel": "mamba",
    "MellumModel": "mellum",
    "MiMoV2FlashModel": "mimo_v2_flash",
    "MiniCPM3Model": "minicpm3",
    "MiniMaxM2Model": "minimax_m2",
    "MiniMaxM3VLTextModel": "minimax_m3_vl_text",
    "MiniMaxModel": "minimax",
    "Ministral3Model": "ministral3",
    "MinistralModel": "ministral",
    "Mistral4Model": "mistral4",
    "MixtralModel": "mixtral",
    "ModernBertDecoderModel": "modernbert-decoder",
    "MptModel": "mpt",
    "NanoChatModel": "nanochat",
    "NemotronHModel": "nemotron_h",
    "NemotronModel": "nemotron",
    "OPTModel": "opt",
    "Olmo2Model": "olmo2",
    "Olmo3Model": "olmo3",
    "OlmoHybridModel": "olmo_hybrid",
    "OlmoModel": "olmo",
    "OlmoeModel": "olmoe",
    "OpenAIGPTModel": "openai-gpt",
    "PersimmonModel": "persimmon",
    "Phi3Model": "phi3",
    "PhiModel": "phi",
    "PhimoeModel": "phimoe",
    "Qwen2MoeModel": "qwen2_moe",
    "Qwen3MoeModel": "qwen3_moe",
    "Qwen3NextModel": "qwen3_next",
    "Qwen3_5MoeTextModel": "qwen3_5_moe_text",
    "Qwen3_5TextModel": "qwen3_5_text",
    "Qwen4ExpTextModel": "qwen4_exp_text",
    "RecurrentGemmaModel": "recurrent_gemma",
    "RwkvModel": "rwkv",
    "SeedOssModel": "seed_oss",
    "SmolLM3Model": "smollm3",
    "SolarOpenModel": "solar_open",
    "StableLmModel": "stablelm",
    "Starcoder2Model": "starcoder2",
    "VaultGemmaModel": "vaultgemma",
    "XGLMModel": "xglm",
    "YoutuModel": "youtu",
    "Zamba2Model": "zamba2",
    "ZambaModel": "zamba",
    "ZayaModel": "zaya",
    "xLSTMModel": "xlstm",
}

# transformers' ``*ForSequenceClassification`` classes built here (``text-classification``).
CLASSIFIERS: dict[str, str] = {
    "AXK1ForSequenceClassification": "axk1",
    "AXK2ForSequenceClassification": "axk2",
    "BioGptForSequenceClassification": "biogpt",
    "BloomForSequenceClassification": "bloom",
    "CTRLForSequenceClassification": "ctrl",
    "CohereCompassTextForSequenceClassification": "cohere_compass_text",
    "DeepseekV2ForSequenceClassification": "deepseek_v2",
    "DeepseekV3ForSequenceClassification": "deepseek_v3",
    "DiffLlamaForSequenceClassification": "diffllama",
    "DogeForSequenceClassification": "doge",
    "FalconForSequenceClassification": "falcon",
    "GPT2ForSequenceClassification": "gpt-sw3",
    "GPTBigCodeForSequenceClassification": "gpt_bigcode",
    "GPTJForSequenceClassification": "gptj",
    "GPTNeoForSequenceClassification": "gpt_neo",
    "GPTNeoXForSequenceClassification": "gpt_neox",
    "Gemma3TextForSequenceClassification": "gemma3_text",
    "GptOssForSequenceClassification": "gpt_oss",
    "HunYuanDenseV1ForSequenceClassification": "hunyuan_v1_dense",
    "HunYuanMoEV1ForSequenceClassification": "hunyuan_v1_moe",
    "JambaForSequenceClassification": "jamba",
    "JetMoeForSequenceClassification": "jetmoe",
    "MiniCPM3ForSequenceClassification": "minicpm3",
    "MiniMaxForSequenceClassification": "minimax",
    "Ministral3ForSequenceClassification": "ministral3",
    "Mistral4ForSequenceClassification": "mistral4",
    "ModernBertDecoderForSequenceClassification": "modernbert-decoder",
    "MptForSequenceClassification": "mpt",
    "OPTForSequenceClassification": "opt",
    "OpenAIGPTForSequenceClassification": "openai-gpt",
    "PersimmonForSequenceClassification": "persimmon",
    "PhimoeForSequenceClassification": "phimoe",
    "Qwen3NextForSequenceClassification": "qwen3_next",
    "Qwen3_5TextForSequenceClassification": "qwen3_5_text",
    "Zamba2ForSequenceClassification": "zamba2",
    "ZambaForSequenceClassification": "zamba",
}

# Class attributes a family's adapter needs beyond the defaults.
ATTRIBUTES: dict[str, dict[str, Any]] = {
    "OPTModel": {"positions_from_mask": True},
    "OPTForSequenceClassification": {"positions_from_mask": True},
    "RwkvModel": {"head_name": "head"},
    "CTRLForSequenceClassification": {"score_name": "classifier"},
    "MiniCPM3Model": {"state_divided_by": "logits_scaling"},
    "MiniCPM3ForSequenceClassification": {"state_divided_by": "logits_scaling"},
    "InklingTextModel": {"state_divided_by": "logits_mup_width_multiplier"},
    "Inkling2TextModel": {"head_name": "model.llm.unembed"},
    "Inkling2LoopTextModel": {"head_name": "model.llm.unembed"},
    "ModernBertDecoderModel": {"after_head": ("decoder",)},
    "ModernBertDecoderForSequenceClassification": {
        "after_head": ("decoder",),
        "score_name": "classifier",
        "scored_head": "head",
        "score_bias": "classifier_bias",
    },
}


def causal_lm_of(model_type: str) -> type:
    """mobius-text's causal-LM class of ``model_type`` (from the package's index: no scan)."""
    from mobius.discovery import read_index

    module, name = read_index("mobius_text")[model_type]["module"].split(":")
    return getattr(importlib.import_module(module), name)


def __getattr__(name: str):
    """The adapter classes, made on first use (each imports only its own family's file)."""
    if name == "MODEL_TYPES":
        return {key: __getattr__(key) for key in (*EMBEDDERS, *CLASSIFIERS)}
    for table, factory in ((EMBEDDERS, backbone_of), (CLASSIFIERS, classifier_of)):
        if name in table:
            cls = factory(causal_lm_of(table[name]), name, **ATTRIBUTES.get(name, {}))
            globals()[name] = cls
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""``mobius build --part text``: the text decoder of a multimodal wrapper checkpoint, alone.

A wrapper checkpoint (Gemma 3, Gemma 3n, Llama 4, Qwen3.5...) is a ``config.json``
with a ``text_config`` whose ``model_type`` mobius registers as a causal LM, and
weights that hold that decoder beside towers, projectors and multimodal embedders.
``--part text`` builds the decoder as an ordinary causal-lm package (with
``genai_config.json`` where onnxruntime-genai runs it):

- **config**: ``text_config``, read by the config class a text-only checkpoint of
  that type uses. The wrapper's top-level ``tie_word_embeddings`` wins (transformers'
  wrappers tie their head by it); where mobius builds the wrapper whole, its config
  class's own ``text_hf_config`` makes the decoder compute what the wrapper computes
  on text (heads whose logit scaling the wrapper does not apply). The package's
  ``config.json`` is that text config.
- **weights**: the decoder's tensors under the wrapper's prefix (``model.language_model.``
  in transformers 5, ``language_model.model.`` in 4.x checkpoints and Llama 4,
  ``model.text_model.`` in Idefics3, or the root in 4.4x Qwen2-VL) renamed to the
  text-only names (``model.``, ``lm_head.``). Tower, projector and embedder tensors
  (:data:`TOWER_MODULES`, and whatever the wrapper's registered class maps outside its
  decoder) are left out on purpose, never read, and listed in one note. Any other
  tensor reaches the decoder, whose strict apply refuses it: no weight is dropped
  silently.
- **companions**: tokenizer, generation config and chat template from the wrapper's
  directory.

Image and audio placeholder ids embed as the decoder's own tokens: the multimodal
embedders some wrappers use for them (Gemma 3n's ``embed_vision``) are left out too.

Without ``--part``, a wrapper type no installed package builds whole, whose text
decoder is registered, is refused with ``--part text`` named as the way to build it.
:func:`describe` tells ``mobius info`` what a build of a wrapper makes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from mobius.errors import CheckpointError, MobiusError
from mobius.plugins import SourceDescription
from mobius.source import ModelSource, hf_config_from_dict, load_hf_config, lookup, read_json
from mobius_vision.plugin import PARTS

logger = logging.getLogger("mobius")


#: Where wrappers keep their text decoder's body, most specific first; a checkpoint with
#: none of them keeps it at the root (``model.``), as transformers 4.4x Qwen2-VL did.
TEXT_BODIES = ("model.language_model.", "language_model.model.", "model.text_model.")
TEXT_HEADS = ("language_model.lm_head.", "lm_head.")

#: The module names transformers' wrappers give what is not their text decoder: vision
#: and audio towers, projectors, connectors, multimodal embedders, learned separators.
TOWER_MODULES = frozenset(
    {
        "vision_tower",
        "vision_model",
        "vision_encoder",
        "visual",
        "image_tower",
        "video_tower",
        "audio_tower",
        "multi_modal_projector",
        "mm_projector",
        "projector",
        "connector",
        "aligner",
        "merger",
        "vision_projection",
        "vision_adapter",
        "vision_resampler",
        "language_projection",
        "qformer",
        "query_tokens",
        "image_newline",
        "vision_embed_tokens",
        "embed_vision",
        "embed_audio",
    }
)

#: What a whole build of each wrapper task writes, for ``mobius info``.
WHOLE_GRAPHS = {
    "vision-language": "vision/, embedding/ and decoder/ graphs (--form split, the default), "
    "or one model.onnx that takes pixel_values (--form single)",
    "cross-attention-vision-language": "vision/ and decoder/ graphs (the image's "
    "cross-attention cache made once)",
    "audio-vision-language": "vision/, audio/, embedding/ and decoder/ graphs (--form split, "
    "the default), or one model.onnx that takes pixel_values and the audio features "
    "(--form single)",
}
#: What an audio-vision-language build of a config without ``audio_config`` makes.
WITHOUT_AUDIO = "; no audio/ graph: the config has no audio tower"


@dataclasses.dataclass(frozen=True)
class Wrapper:
    """A model directory whose ``config.json`` has a ``text_config`` with a ``model_type``."""

    path: Path
    raw: dict
    text_type: str

    @property
    def model_type(self) -> str:
        return self.raw["model_type"]

    def towers(self) -> str:
        """Its other sub-models in words, from the sub-configs: ``"vision and audio towers"``."""
        kinds = [
            key.removesuffix("_config")
            for key, value in self.raw.items()
            if key.endswith("_config") and key != "text_config" and isinstance(value, dict)
            if isinstance(value.get("model_type"), str)
        ]
        if not kinds:
            return "non-text modules"
        return " and ".join(kinds) + (" towers" if len(kinds) > 1 else " tower")


def read_wrapper(path: Path) -> Wrapper | None:
    """The wrapper at ``path``, or None for anything else (a file, no ``text_config``)."""
    if not path.is_dir() or not (path / "config.json").is_file():
        return None
    try:
        raw = read_json(path / "config.json")
    except MobiusError:
        return None  # not readable as a config: core's reader says why
    text = raw.get("text_config")
    if not isinstance(raw.get("model_type"), str):
        return None
    if not isinstance(text, dict) or not isinstance(text.get("model_type"), str):
        return None
    return Wrapper(path, raw, text["model_type"])


def _text_decoder(wrapper: Wrapper, registry, model_type: str | None = None):
    """The registration of the wrapper's text decoder, or None when it is not a causal LM."""
    key = model_type or wrapper.text_type
    if key not in registry:
        return None
    entry = registry.get(key)
    return entry if entry.task == "causal-lm" else None


def _whole(wrapper: Wrapper, registry):
    """The registration that builds the wrapper whole, or None when no installed package has one."""
    try:
        return lookup(registry, wrapper.path)
    except MobiusError:
        return None


def recognise(path: Path, options, registry) -> ModelSource | None:
    """``--part text`` on a wrapper: its :class:`TextPartSource`; a wrapper no package builds whole: an error.

    None for everything else (left to the other readers).
    """
    part = options.plugin.get("part", "all")
    if part not in PARTS:
        raise MobiusError(f"--part must be one of {', '.join(PARTS)}, not {part!r}")
    wrapper = read_wrapper(path)
    if part == "all":
        if wrapper is None or options.model_type or wrapper.raw.get("auto_map"):
            return None
        if _text_decoder(wrapper, registry) is None or _whole(wrapper, registry) is not None:
            return None
        raise MobiusError(
            f"model type {wrapper.model_type!r} is not built whole yet (mobius list); "
            f"--part text builds its {wrapper.text_type} text decoder alone"
        )
    if wrapper is None:
        raise MobiusError(
            f"--part text builds the text decoder of a multimodal checkpoint (a directory whose "
            f"config.json has a text_config); {path} is not one: build it without --part"
        )
    key = options.model_type or wrapper.text_type
    entry = _text_decoder(wrapper, registry, key)
    if entry is None:
        what = (
            f"a {registry.get(key).task} model"
            if key in registry
            else "which no installed package registers (mobius list)"
        )
        raise MobiusError(
            f"--part text builds causal-LM text decoders; {wrapper.model_type}'s is {key!r}, {what}"
        )
    return text_part_source(wrapper, entry, options, registry)


class TextPartSource(ModelSource):
    """A wrapper's text decoder as a causal LM: its build is that of a text-only checkpoint.

    ``--part`` is consumed here: the decoder's build is not refused for an option of
    vision–language builds.
    """

    def build(self, options, registry):
        plugin = {name: value for name, value in options.plugin.items() if name != "part"}
        return super().build(dataclasses.replace(options, plugin=plugin), registry)


def text_part_source(wrapper: Wrapper, entry, options, registry) -> TextPartSource:
    """The :class:`TextPartSource` of ``wrapper``'s decoder (``entry``); weights read lazily."""
    from mobius.weights import open_checkpoint

    whole = _whole(wrapper, registry)
    text_config = text_hf_config(wrapper, whole)
    towers = _registered_tower_prefixes(whole)
    stored = (
        wrapper.raw["text_config"].get("dtype"),
        *map(wrapper.raw.get, ("torch_dtype", "dtype")),
    )
    dtype = next((d for d in stored if isinstance(d, str)), None)

    def checkpoint() -> dict:
        weights = open_checkpoint(wrapper.path, allow_pickle=options.allow_pickle)
        return text_weights(weights, wrapper.path, towers)

    return TextPartSource(
        path=wrapper.path,
        entry=entry,
        hf_config=text_config,
        checkpoint=checkpoint,
        source_dir=wrapper.path,
        text_files={"config.json": text_config.to_json_string(use_diff=False)},
        stored_dtype=dtype,
    )


def text_hf_config(wrapper: Wrapper, whole) -> Any:
    """The transformers config the decoder is built from (see the module doc).

    ``whole`` is the registration that builds the wrapper whole, if any. A wrapper no
    package builds whole may be a type transformers does not know: only its
    ``text_config`` (and top-level ``tie_word_embeddings``) is read then.
    """
    adjust = getattr(whole.config_class(), "text_hf_config", None) if whole else None
    if adjust is not None:
        return adjust(load_hf_config(wrapper.path))
    text = hf_config_from_dict(wrapper.raw["text_config"])
    tie = wrapper.raw.get("tie_word_embeddings")
    if isinstance(tie, bool):
        text.tie_word_embeddings = tie  # transformers' wrappers tie their head by their own
    return text


def _registered_tower_prefixes(whole) -> tuple[str, ...]:
    """The checkpoint prefixes the wrapper's registered class (``whole``) maps outside its decoder."""
    renames = getattr(whole.module_class(), "renames", None) if whole else None
    if not isinstance(renames, dict):
        return ()
    return tuple(old for old, new in renames.items() if not new.startswith("language_model."))


def _tower_group(name: str, prefixes: tuple[str, ...]) -> str | None:
    """``name``'s tower in the note (``model.vision_tower.*``), or None for a decoder tensor."""
    for prefix in prefixes:
        if name.startswith(prefix):
            return prefix.rstrip(".") + ".*"
    parts = name.split(".")
    index = 1 if parts[0] == "model" and len(parts) > 1 else 0
    if parts[index] not in TOWER_MODULES:
        return None
    group = ".".join(parts[: index + 1])
    return group + ".*" if len(parts) > index + 1 else group


def text_weights(checkpoint, path: Path, tower_prefixes: tuple[str, ...] = ()) -> dict:
    """The decoder's tensors of a wrapper checkpoint under text-only names; towers left out, and said.

    Nothing is read: the values stay the checkpoint's lazy tensors. Tensors that are
    neither the decoder's (by :data:`TEXT_BODIES` and :data:`TEXT_HEADS`) nor a
    tower's keep their names, for the decoder's strict apply to refuse.
    """
    names = list(checkpoint)
    # The layout the decoder's tensors follow: the body most of them sit under.
    counts = Counter(b for n in names for b in TEXT_BODIES if n.startswith(b))
    body = counts.most_common(1)[0][0] if counts else "model."
    renames = {body: "model.", **{head: "lm_head." for head in TEXT_HEADS}}
    text: dict[str, Any] = {}
    left_out: Counter[str] = Counter()
    for name in names:
        group = _tower_group(name, tower_prefixes)
        if group is not None:
            left_out[group] += 1
            continue
        old = next((prefix for prefix in renames if name.startswith(prefix)), None)
        new = name if old is None else renames[old] + name[len(old) :]
        if new in text:
            raise CheckpointError(f"{path}: two tensors of the checkpoint are the decoder's {new}")
        text[new] = checkpoint[name]
    if not any(name.startswith("model.") for name in text):
        raise CheckpointError(
            f"{path}: no text decoder tensors (under {', '.join(TEXT_BODIES)} or model.)"
        )
    if left_out:
        groups = ", ".join(
            f"{group} ({count} tensor{'s' if count > 1 else ''})"
            for group, count in sorted(left_out.items())
        )
        logger.warning("--part text: ignored on purpose: %s", groups)
    return text


def describe(path: Path, registry) -> SourceDescription | None:
    """What a build of a wrapper makes, whole and with ``--part text``, for ``mobius info``.

    For a wrapper no package builds whole, ``mobius info`` describes its text decoder
    (the build ``--part text`` makes) and says so.
    """
    wrapper = read_wrapper(path)
    if wrapper is None:
        return _one_level_description(path, registry)
    if _text_decoder(wrapper, registry) is None:
        return None
    text = (
        f"--part text: the {wrapper.text_type} text decoder alone (a causal-lm package, "
        f"model.onnx); its {wrapper.towers()} left out"
    )
    whole = _whole(wrapper, registry)
    if whole is None:
        return SourceDescription(
            (
                f"{wrapper.model_type} is not built whole yet; --part text builds its "
                f"{wrapper.text_type} decoder, described here",
                text,
            ),
            plugin={"part": "text"},
        )
    graphs = WHOLE_GRAPHS.get(whole.task, f"the {whole.task} package")
    if whole.task == "audio-vision-language" and not isinstance(
        wrapper.raw.get("audio_config"), dict
    ):
        graphs = WHOLE_GRAPHS["vision-language"] + WITHOUT_AUDIO
    return SourceDescription((f"{wrapper.model_type} whole: {graphs}", text))


def _one_level_description(path: Path, registry) -> SourceDescription | None:
    """The graphs of a model that sees and hears whose config keeps its decoder's fields at
    the top (no ``text_config``, so no ``--part text``), for ``mobius info``; None else."""
    if not path.is_dir() or not (path / "config.json").is_file():
        return None
    try:
        entry = lookup(registry, path)
    except MobiusError:
        return None
    if entry.task != "audio-vision-language":
        return None
    return SourceDescription((f"whole: {WHOLE_GRAPHS[entry.task]}",))

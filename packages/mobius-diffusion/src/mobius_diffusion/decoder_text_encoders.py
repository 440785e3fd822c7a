"""Pipeline components that are decoder LLMs used as text encoders, and the states each pipeline reads.

Sana, Lumina 2, CogView4, Z-Image, HunyuanVideo, HiDream, Qwen-Image and Flux.2
condition on a decoder's token states. mobius-text builds such a component with its
``text-encoder`` task (registration keys ``Gemma2Model``, ``LlamaModel``,
``Qwen3Model``, ``GlmModel``, ``Qwen2_5_VLTextModel``, ``Mistral3TextModel``): the
last state is always an output (``last_hidden_state``), and ``--hidden-states`` adds
the layers a pipeline reads instead (``hidden_states.{i}``). :func:`text_encoder_key` maps the class a
``model_index.json`` names to that key; :func:`component_plugin` gives each
component's build its ``--hidden-states``, from :data:`PIPELINE_HIDDEN_STATES` by
the pipeline's ``_class_name`` unless the user chose one.
"""

from __future__ import annotations

from mobius.errors import ConfigError

#: The text-encoder task (mobius-text) and its build option's ``dest``.
TEXT_ENCODER_TASK = "text-encoder"
HIDDEN_STATES_OPTION = "hidden_states"

#: Classes a pipeline saves its decoder text encoder as, that are not themselves a
#: text-encoder key: the key of the bare backbone each builds as (a causal LM's head
#: and a VLM's vision tower are ignored by that build).
TEXT_ENCODER_CLASSES = {
    "Gemma2PreTrainedModel": "Gemma2Model",  # the class Sana's pipeline annotates
    "LlamaForCausalLM": "LlamaModel",  # HiDream's text_encoder_4
    "Qwen2_5_VLForConditionalGeneration": "Qwen2_5_VLTextModel",  # Qwen-Image
    "Qwen3ForCausalLM": "Qwen3Model",  # Flux.2 Klein
    "Mistral3ForConditionalGeneration": "Mistral3TextModel",  # Flux.2
}

#: Pipelines whose decoder text encoder reads the prompt with its images: the class -> key
#: it builds as there instead (Qwen-Image Edit's Qwen2.5-VL reads the input image through
#: its vision tower: mobius-vision's image-text encoder).
PIPELINE_TEXT_ENCODER_CLASSES = {
    "QwenImageEditPipeline": {"Qwen2_5_VLForConditionalGeneration": "Qwen2_5_VLModel"},
}

_LAST = None  # the last state only: last_hidden_state, no extra output
#: transformers' ``hidden_states[i]`` each pipeline reads from its decoder text
#: encoders, as a ``--hidden-states`` value (diffusers' encode_prompt of each).
PIPELINE_HIDDEN_STATES: dict[str, str | None] = {
    "SanaPipeline": _LAST,
    "SanaSprintPipeline": _LAST,
    "QwenImagePipeline": _LAST,
    "QwenImageImg2ImgPipeline": _LAST,
    "QwenImageInpaintPipeline": _LAST,
    "Lumina2Pipeline": "-2",
    "CogView4Pipeline": "-2",
    "CogView4ControlPipeline": "-2",
    "ZImagePipeline": "-2",
    "ZImageImg2ImgPipeline": "-2",
    "ZImageInpaintPipeline": "-2",
    "HunyuanVideoPipeline": "-3",  # num_hidden_layers_to_skip=2
    "HiDreamImagePipeline": "all",  # every layer's output, hidden_states[1:]
    "Flux2KleinPipeline": "9,18,27",  # stacked per token
    "Flux2Pipeline": "10,20,30",  # stacked per token
}


def text_encoder_key(class_name: str, pipeline_class: str | None = None) -> str:
    """The registry key a pipeline component class builds as: mapped if a decoder saved as
    another class (:data:`PIPELINE_TEXT_ENCODER_CLASSES` for ``pipeline_class``, then
    :data:`TEXT_ENCODER_CLASSES`), else the class name itself."""
    by_pipeline = PIPELINE_TEXT_ENCODER_CLASSES.get(pipeline_class, {})
    return by_pipeline.get(class_name) or TEXT_ENCODER_CLASSES.get(class_name, class_name)


def component_plugin(plugin: dict, task: str, pipeline_class, component: str) -> dict:
    """The plugin build options of one model component of a pipeline.

    ``--hidden-states`` goes to text-encoder components only (every other task refuses
    it): the user's value if given, else the pipeline's (:data:`PIPELINE_HIDDEN_STATES`).

    Raises:
        ConfigError: a decoder text encoder in a pipeline not in the table, with no
            ``--hidden-states`` given: which states it reads is unknown.
    """
    chosen = plugin.get(HIDDEN_STATES_OPTION)
    options = {k: v for k, v in plugin.items() if k != HIDDEN_STATES_OPTION}
    if task != TEXT_ENCODER_TASK:
        return options
    if chosen is None:
        if pipeline_class not in PIPELINE_HIDDEN_STATES:
            raise ConfigError(
                f"pipeline component {component!r} is a decoder text encoder, and mobius does "
                f"not know which hidden states a {pipeline_class} reads from it; give them "
                "with --hidden-states (-2, or all)"
            )
        chosen = PIPELINE_HIDDEN_STATES[pipeline_class]
    if chosen is not None:
        options[HIDDEN_STATES_OPTION] = chosen
    return options


def check_hidden_states(plugin: dict, tasks, pipeline_dir) -> None:
    """Refuse a ``--hidden-states`` given for a pipeline without a decoder text encoder
    (``tasks``: those of its built components), rather than drop it unsaid."""
    if plugin.get(HIDDEN_STATES_OPTION) is not None and TEXT_ENCODER_TASK not in set(tasks):
        raise ConfigError(
            f"--hidden-states applies to decoder text encoders; pipeline {pipeline_dir} has none"
        )

"""What a package keeps of the HF processor, and reading it back.

transformers splits a processor's settings over three files: the image processor's in
``preprocessor_config.json`` (or, as transformers 5 saves them, nested under
``"image_processor"`` in ``processor_config.json``), the processor's own (the image
token count, ``patch_size``, tile tokens...) in ``processor_config.json``, and the
tokenizer's files. A build copies ``preprocessor_config.json`` and the tokenizer files;
``processor_config.json`` is a name onnxruntime-genai's processor config already takes
in a package (:mod:`mobius_vision.genai`), so :func:`keep_processor_config` stores the
HF one as :data:`HF_PROCESSOR_FILE`. Nothing here imports Pillow or onnxruntime: the
build calls it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from mobius.errors import MobiusError
from mobius.safe_paths import join_inside

#: The source's HF ``processor_config.json``, as a vision–language package keeps it.
HF_PROCESSOR_FILE = "hf_processor_config.json"

logger = logging.getLogger("mobius")


def read_json_object(path: Path) -> dict:
    """A JSON object file, ``{}`` when absent; anything else is a one-line MobiusError."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MobiusError(f"unreadable {path.name} in {path.parent}: {exc}") from None
    if not isinstance(data, dict):
        raise MobiusError(f"{path.name} in {path.parent} is not a JSON object")
    return data


def keep_processor_config(source) -> None:
    """Add the source's HF ``processor_config.json`` to the package it builds, as
    :data:`HF_PROCESSOR_FILE` (the build's in-memory companions, ``source.text_files``).

    Called by the vision–language tasks while they configure a build; a source without
    one (or not a directory) adds nothing, an unreadable one is logged and skipped
    (the runner then uses the processor's defaults).
    """
    directory = getattr(source, "source_dir", None)
    text_files = getattr(source, "text_files", None)
    if directory is None or text_files is None:
        return
    keep_sub_tokenizers(Path(directory), text_files)
    path = Path(directory) / "processor_config.json"
    try:
        settings = read_json_object(path)
    except MobiusError as exc:
        logger.warning("the package will not keep the processor settings: %s", exc)
        return
    if settings:
        text_files[HF_PROCESSOR_FILE] = json.dumps(settings, indent=2, sort_keys=True) + "\n"


#: Tokenizers an HF processor saves in a folder of their own (InstructBLIP's Q-Former's).
SUB_TOKENIZERS = ("qformer_tokenizer",)
#: The text files of a saved tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
)


def keep_sub_tokenizers(directory: Path, text_files: dict[str, str]) -> None:
    """Add the files of the processor's own-folder tokenizers (:data:`SUB_TOKENIZERS`) to
    ``text_files``, under the same folder; fixed names only, an unreadable file skipped."""
    for folder in SUB_TOKENIZERS:
        for name in TOKENIZER_FILES:
            path = directory / folder / name
            if not path.is_file():
                continue
            # Copied into the package: a symlink out of the source folder is refused.
            path = join_inside(directory, f"{folder}/{name}", source=directory)
            try:
                text_files[f"{folder}/{name}"] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                logger.warning("the package will not keep %s/%s: %s", folder, name, exc)


@dataclass
class PackageSettings:
    """A package's processor settings: ``config`` (config.json), ``image`` (the image
    processor's) and ``processor`` (the HF processor's own, without its image processor)."""

    config: dict = field(default_factory=dict)
    image: dict = field(default_factory=dict)
    processor: dict = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        value = self.config.get("model_type")
        return value if isinstance(value, str) else ""


def read_settings(package_dir: str | Path) -> PackageSettings:
    """The processor settings a built package holds (module docstring)."""
    package = Path(package_dir)
    processor = read_json_object(package / HF_PROCESSOR_FILE)
    nested = processor.pop("image_processor", None)
    image = read_json_object(package / "preprocessor_config.json")
    if not image and isinstance(nested, dict):
        image = nested
    return PackageSettings(read_json_object(package / "config.json"), image, processor)


def load_tokenizer(package_dir: str | Path):
    """The package's tokenizer (transformers' ``AutoTokenizer``, no remote code, no torch),
    its files checked first as every runner's are (:func:`mobius.generate.load_tokenizer`)."""
    from mobius.generate import load_tokenizer as load_package_tokenizer

    return load_package_tokenizer(package_dir)

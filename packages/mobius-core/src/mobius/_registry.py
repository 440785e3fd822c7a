"""The registry of architectures, filled by domain packages through entry points.

A registration maps a key (an HF ``model_type`` or a diffusers ``_class_name``)
to a module class, its default task and its config class, and records which
package registered it. Domain packages declare ``register(registry)`` in the
``mobius.plugins`` entry-point group; the registry loads them on first lookup.

Verified keys (optional): a package may also call
``registry.declare_verified(package, "import.name:file.json")`` from its
``register``, naming a JSON file shipped inside it that lists the keys that
passed its parity suite (a list of keys, or an object whose ``"verified"``
member is that list). The file is read on the first :meth:`Registry.is_verified`
question about that package; a package that declares nothing answers ``None``.
The object form may also say what verified them (:meth:`Registry.verified_by`):
``"tests"`` maps a key to the test that verifies it
(``"tests/test_parity.py::test_causal_lm_parity"``), and ``"generated_by"`` with
the reference library's version (``"transformers": "5.24.0"``) names the run
that wrote the file.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import logging
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from mobius.errors import MobiusError, UnknownModelTypeError
from mobius.options import ENCODER_HEADS
from mobius.plugins import CliOption, CommandInfo, RunnerInfo, SourceInfo, TaskInfo, load

#: Core's own commands; a domain's command takes another name.
CORE_COMMANDS = ("build", "generate", "embed", "classify", "list", "info")
#: Core's commands that run packages with the domains' runners.
RUNNER_COMMANDS = ("generate", "classify")

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "mobius.plugins"

# The domain packages of this project: a key nobody registers may belong to one that is
# not installed. Core knows the packages, never which model families they hold.
DOMAIN_PACKAGES = ("mobius-text", "mobius-vision", "mobius-audio", "mobius-diffusion")


@dataclass(frozen=True)
class Registration:
    """One registered architecture."""

    key: str
    module: Any  # class or lazy "module:Class"
    task: str
    config: Any  # class, lazy "module:Class", or None for the module's ``config_class``
    package: str

    def module_class(self) -> type:
        return load(self.module)

    def config_class(self) -> type:
        if self.config is None:
            return self.module_class().config_class
        return load(self.config)


class Registry:
    """Keys to :class:`Registration`, with plugins discovered lazily."""

    def __init__(self, discover: bool = True) -> None:
        self._entries: dict[str, Registration] = {}
        self._discover = discover
        self._plugins_loaded = False
        self.plugin_errors: dict[str, str] = {}
        self.plugins: dict[str, str] = {}  # entry-point name -> distribution
        self._verified_sources: dict[str, str] = {}  # package -> "import.name:file.json"
        self._verified: dict[str, frozenset[str] | None] = {}  # package -> keys, once read
        self._verified_notes: dict[str, dict[str, Any]] = {}  # package -> what verified them
        self._tasks: dict[str, TaskInfo] = {}
        self._sources: dict[str, SourceInfo] = {}
        self._options: dict[tuple[str, str], CliOption] = {}  # (command, dest) -> option
        self._runners: dict[str, RunnerInfo] = {}
        self._commands: dict[str, CommandInfo] = {}
        self._register_core()

    def _register_core(self) -> None:
        """The contracts core owns itself (causal LM, seq2seq, feature extraction) and the
        generate options several domains read (``--guidance-scale``, ``--audio``)."""
        for name, target, heads, validate in (
            ("causal-lm", "_causal_lm:CausalLMTask", (), "validate_causal_lm"),
            ("seq2seq", "_seq2seq:Seq2SeqTask", (), "validate_seq2seq"),
            (
                "feature-extraction",
                "_feature_extraction:FeatureExtractionTask",
                ENCODER_HEADS,
                "validate_feature_extraction",
            ),
        ):
            self.register_task(
                TaskInfo(
                    name,
                    f"mobius.tasks.{target}",
                    "mobius-core",
                    heads,
                    validate=f"mobius._validators:{validate}",
                )
            )
        # Classifier-free guidance: diffusion pipelines, music and speech generators all mix a
        # conditional and an unconditional prediction, so one flag serves every domain.
        self.register_option(
            CliOption(
                "generate",
                "guidance_scale",
                ("--guidance-scale",),
                dict(
                    type=float,
                    default=None,
                    metavar="G",
                    help="classifier-free guidance scale, for packages that mix a conditional "
                    "and an unconditional prediction (image, music and speech generators); "
                    "default: the package's own; 1 turns guidance off where the model allows",
                ),
                group="guided generators",
                package="mobius-core",
            )
        )
        # Images for a prompt: vision-language models (mobius-vision) and image-to-image
        # diffusion pipelines (mobius-diffusion) both take them.
        self.register_option(
            CliOption(
                "generate",
                "images",
                ("--image",),
                dict(
                    action="append",
                    default=None,
                    metavar="FILE",
                    help="an image for a package that sees (a vision-language model: repeat it "
                    "for several, in the order of the prompt's placeholders) or the input image "
                    "of an image-to-image or inpainting pipeline (PNG, JPEG...)",
                ),
                group="packages that see",
                package="mobius-core",
            )
        )
        # Audio clips for a prompt: speech LLMs (mobius-audio) and models that see and hear
        # (mobius-vision) both take them.
        self.register_option(
            CliOption(
                "generate",
                "audios",
                ("--audio",),
                dict(
                    action="append",
                    default=None,
                    metavar="FILE",
                    help="an audio clip for a package that hears (a speech LLM, a model that "
                    "sees and hears; WAV, FLAC, OGG, MP3); repeat it for several, in the order "
                    "of the prompt's audio placeholders",
                ),
                group="packages that hear",
                package="mobius-core",
            )
        )

    def register(
        self, key: str, module: Any, *, task: str, package: str, config: Any = None
    ) -> Registration:
        """Add a key; registering the same key for the same package again is a no-op."""
        entry = Registration(key, module, task, config, package)
        existing = self._entries.get(key)
        if existing is not None and existing.package != package:
            raise ValueError(
                f"model type {key!r} is already registered by {existing.package}, not {package}"
            )
        self._entries[key] = entry
        return entry

    # -- a domain's slice: tasks, source recognisers, CLI options, runners ---------------

    def register_task(self, info: TaskInfo) -> None:
        """Add a task (an I/O contract); the same name again from the same package is a no-op."""
        self._claim(self._tasks, info.name, info, "task")

    def register_source(self, info: SourceInfo) -> None:
        """Add a source recogniser (see :class:`mobius.plugins.SourceInfo`)."""
        self._claim(self._sources, info.name, info, "source recogniser")

    def register_command(self, info: CommandInfo) -> None:
        """Add a domain's top-level command (see :class:`mobius.plugins.CommandInfo`)."""
        if info.name in CORE_COMMANDS:
            raise ValueError(f"command {info.name!r} is one of core's own")
        self._claim(self._commands, info.name, info, "command")

    def register_option(self, option: CliOption) -> None:
        """Add an option to ``mobius build`` / ``generate`` / ``classify`` or a domain's
        command (see :class:`mobius.plugins.CliOption`); register the command first."""
        self._check_command(option.command, f"option {option.dest!r}", ("build",))
        self._claim(self._options, (option.command, option.dest), option, "option")

    def register_runner(self, info: RunnerInfo) -> None:
        """Add a runner of ``mobius generate``, ``classify`` or a domain's command
        (see :class:`mobius.plugins.RunnerInfo`); register the command first."""
        self._check_command(info.command, f"runner {info.name!r}", ())
        self._claim(self._runners, info.name, info, "runner")

    def _check_command(self, command: str, what: str, also: tuple[str, ...]) -> None:
        known = (*also, *RUNNER_COMMANDS, *self._commands)
        if command not in known:
            raise ValueError(f"{what}: command {command!r} is not one of {', '.join(known)}")

    @staticmethod
    def _claim(table: dict, key, info, what: str) -> None:
        existing = table.get(key)
        if existing is not None and existing.package != info.package:
            raise ValueError(f"{what} {key!r} is already registered by {existing.package}")
        table[key] = info

    def task(self, name: str, ep: str = "default"):
        """An instance of the task ``name`` (``"causal-lm"``) building graphs for ``ep``."""
        self.load_plugins()
        try:
            info = self._tasks[name]
        except KeyError:
            known = ", ".join(sorted(self._tasks))
            raise MobiusError(
                f"unknown task {name!r} (known: {known}); the domain package that defines it "
                "may not be installed or may have failed to load (mobius list)"
            ) from None
        if info.task is None:
            raise MobiusError(
                f"{name} packages are assembled from other tasks' graphs by their source; "
                "no task builds one"
            )
        return info.task_class()(ep)

    def tasks(self) -> dict[str, TaskInfo]:
        self.load_plugins()
        return dict(self._tasks)

    def sources(self) -> list[SourceInfo]:
        self.load_plugins()
        return list(self._sources.values())

    def options(self, command: str) -> list[CliOption]:
        self.load_plugins()
        return [o for (c, _), o in self._options.items() if c == command]

    def commands(self) -> list[CommandInfo]:
        """The domains' own top-level commands, in registration order."""
        self.load_plugins()
        return list(self._commands.values())

    def runners(self, command: str = "generate") -> list[RunnerInfo]:
        """The runners of ``command`` (``"generate"``, ``"classify"``, a domain's command),
        in registration order."""
        self.load_plugins()
        return [r for r in self._runners.values() if r.command == command]

    def declare_verified(self, package: str, resource: str) -> None:
        """Declare where ``package`` lists its verified keys; the list is read on first use.

        ``resource`` is ``"import.name:file.json"``, a file inside an importable
        package (see the module docstring for its content). Declaring again
        replaces the previous declaration.
        """
        if ":" not in resource:
            raise ValueError(f"verified-keys resource must be 'import.name:file', not {resource!r}")
        self._verified_sources[package] = resource
        self._verified.pop(package, None)
        self._verified_notes.pop(package, None)

    def verified_keys(self, package: str) -> frozenset[str] | None:
        """The keys ``package`` lists as verified, or None when it declares no (readable) list."""
        self.load_plugins()
        if package not in self._verified:
            self._verified[package] = self._read_verified(package)
        return self._verified[package]

    def is_verified(self, key: str) -> bool | None:
        """Whether ``key`` passed its package's parity suite.

        ``None`` when that is not known: the key is not registered, or its package
        declares no verified list.
        """
        self.load_plugins()
        entry = self._entries.get(key)
        keys = self.verified_keys(entry.package) if entry is not None else None
        return None if keys is None else key in keys

    def verified_by(self, key: str) -> str | None:
        """What verified ``key``: the test its package's list names for it, else the run that wrote the list.

        ``None`` when ``key`` is not verified (or that is not known).
        """
        if not self.is_verified(key):
            return None
        package = self._entries[key].package
        notes = self._verified_notes.get(package, {})
        test = notes.get("tests", {}).get(key)
        if test:
            return f"{package}: {test}"
        return f"{package}'s parity suite" + (f" ({notes['run']})" if notes.get("run") else "")

    def _read_verified(self, package: str) -> frozenset[str] | None:
        resource = self._verified_sources.get(package)
        if resource is None:
            return None
        module, _, name = resource.partition(":")
        try:
            data = json.loads(importlib.resources.files(module).joinpath(name).read_text())
            keys = data["verified"] if isinstance(data, dict) else data
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise ValueError("expected a list of keys")
        except Exception as exc:  # a broken list makes the status unknown, not the registry fail
            logger.warning("verified keys of %s (%s) unreadable: %s", package, resource, exc)
            return None
        self._verified_notes[package] = _verification_notes(data)
        return frozenset(keys)

    def load_plugins(self) -> None:
        """Call every installed plugin's ``register``; a failing plugin is recorded, not fatal."""
        if self._plugins_loaded or not self._discover:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=PLUGIN_GROUP):
            dist = ep.dist.name if ep.dist is not None else ep.value
            try:
                ep.load()(self)
                self.plugins[ep.name] = dist
            except Exception as exc:  # one broken plugin must not hide the others
                self.plugin_errors[dist] = f"{type(exc).__name__}: {exc}"
                logger.warning("mobius plugin %s failed to load: %s", dist, exc)

    def __contains__(self, key: str) -> bool:
        self.load_plugins()
        return key in self._entries

    def keys(self) -> list[str]:
        self.load_plugins()
        return sorted(self._entries)

    def entries(self) -> list[Registration]:
        self.load_plugins()
        return [self._entries[k] for k in sorted(self._entries)]

    def by_package(self) -> dict[str, list[Registration]]:
        grouped: dict[str, list[Registration]] = {}
        for entry in self.entries():
            grouped.setdefault(entry.package, []).append(entry)
        return grouped

    def get(self, key: str) -> Registration:
        """The registration of ``key``, or :class:`UnknownModelTypeError` explaining what to do."""
        self.load_plugins()
        try:
            return self._entries[key]
        except KeyError:
            raise UnknownModelTypeError(self._unknown_message(key)) from None

    def _unknown_message(self, key: str) -> str:
        parts = [f"unknown model type {key!r}"]
        close = difflib.get_close_matches(key, list(self._entries), n=3, cutoff=0.6)
        if close:
            parts.append("close matches: " + ", ".join(close))
        installed = sorted(set(self.plugins.values()) | {e.package for e in self._entries.values()})
        parts.append("installed: " + (", ".join(installed) if installed else "no domain packages"))
        missing = [p for p in DOMAIN_PACKAGES if p not in installed]
        if missing:
            choices = ", ".join(f"{p} (pip install {p})" for p in missing)
            parts.append(
                f"if a domain package that is not installed builds it, install it: {choices}"
            )
        if self.plugin_errors:
            failed = ", ".join(f"{d} ({e})" for d, e in self.plugin_errors.items())
            parts.append("plugins that failed to load: " + failed)
        return "; ".join(parts)


def _verification_notes(data: Any) -> dict[str, Any]:
    """What a verified-keys file says verified them: ``{"tests": {key: test}, "run": "..."}``.

    Members of the wrong type are ignored: they leave the answer less precise,
    never wrong.
    """
    if not isinstance(data, dict):
        return {}
    tests = data.get("tests")
    tests = tests if isinstance(tests, dict) else {}
    notes: dict[str, Any] = {
        "tests": {k: v for k, v in tests.items() if isinstance(k, str) and isinstance(v, str)}
    }
    references = [
        f"{name} {value}"
        for name, value in data.items()
        if name not in ("generated_by", "verified", "tests") and isinstance(value, str)
    ]
    generator = data.get("generated_by")
    run = " against ".join(
        part
        for part in (generator if isinstance(generator, str) else "", ", ".join(references))
        if part
    )
    if run:
        notes["run"] = run
    return notes


registry = Registry()

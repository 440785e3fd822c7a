"""What a domain package contributes through its ``register(registry)``: the plugin API.

A domain package (``mobius-text``, ``mobius-vision``...) owns a whole slice of
mobius and hands it to core's :data:`mobius.registry` when it registers:

- **model types**: ``registry.register(key, "pkg.models.file:Class", task=..., package=...)``;
- **tasks** (I/O contracts): ``registry.register_task(TaskInfo(...))``; the class is
  imported when a build first asks for it;
- **source recognisers**: ``registry.register_source(SourceInfo(...))``: a function
  ``recognise(path, options, registry) -> Source | None`` that claims what core's
  own reader does not know (a diffusers pipeline directory, a lone adapter file, a
  sentence-transformers directory, a GGUF file), and optionally describes it to
  ``mobius info`` (``describe(path, registry) -> SourceDescription | None``);
- **CLI options**: ``registry.register_option(CliOption(...))``, added to
  ``mobius build --help`` or ``mobius generate --help``; a build option's value
  reaches the build in :attr:`mobius.BuildOptions.plugin` under its ``dest``;
- **runners**: ``registry.register_runner(RunnerInfo(...))``: ``mobius generate``
  (or ``mobius classify``, by the runner's ``command``) runs a package with the
  first runner of that command that accepts its directory;
- **commands**: ``registry.register_command(CommandInfo(...))`` adds a top-level
  command of the domain's own (``mobius detect``, ``mobius depth``) that takes a
  package and input files, with its options and runners registered as above.

Everything here is plain data with lazy ``"module:attribute"`` strings, so that
registering imports nothing heavy: ``mobius --help`` and ``mobius list`` stay fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any


def load(target: Any) -> Any:
    """Resolve a lazy ``"module:attribute"`` string; anything else is returned as is."""
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True)
class TaskInfo:
    """A task (an I/O contract) by name, its class imported on first use.

    ``heads`` lists the values of ``--head`` the task accepts besides ``auto``
    (``"none"`` first): they become the choices of ``mobius build --head``.
    ``validate`` is the task's ``mobius build --validate`` check (callable or lazy
    ``"module:function"``, see :mod:`mobius.validate`). ``task`` is None for a
    task no class builds: its packages are assembled by a source from other tasks'
    graphs (a diffusers pipeline), and it is registered for its validator alone.
    """

    name: str
    task: Any  # a ModelTask subclass, lazy "module:Class", or None (see above)
    package: str
    heads: tuple[str, ...] = ()
    validate: Any = None

    def task_class(self) -> type:
        return load(self.task)


@dataclass(frozen=True)
class SourceInfo:
    """A source recogniser: ``recognise(path, options, registry) -> Source | None``.

    ``path`` is the resolved local path (a directory or a file). A recogniser
    returns None for what is not its own and raises a :class:`~mobius.errors.MobiusError`
    for what is its own but broken. Recognisers run in registration order, before
    core's own reader (a model directory with ``config.json``).
    """

    name: str
    recognise: Any  # callable or lazy "module:function"
    package: str
    #: A sentence for ``mobius build --help``: what this source reads and builds.
    help: str = ""
    #: For hub downloads: ``hub_files(snapshot, allow_pickle) -> (allow, ignore) | None``
    #: (callable or lazy string) looks at the first snapshot (configs, tokenizer,
    #: root weights) and names the files of a second download its source needs
    #: (a pipeline's component folders), or None when the snapshot is not its kind.
    hub_files: Any = None
    #: For ``mobius info``: ``describe(path, registry) -> SourceDescription | None``
    #: (callable or lazy string) says what a build of the model directory ``path`` makes,
    #: or None when ``path`` is not its kind.
    describe: Any = None

    def function(self):
        return load(self.recognise)


@dataclass(frozen=True)
class SourceDescription:
    """What a source recogniser tells ``mobius info`` about a model directory.

    ``notes`` are lines saying what a build makes (the graphs, the parts a build
    option selects). ``plugin`` holds build-option values (by ``dest``) under which
    ``mobius info`` describes the model, where the default build cannot be made but
    a part of it can (``{"part": "text"}``: the text decoder of a wrapper nobody
    builds whole); the notes then say so.
    """

    notes: tuple[str, ...] = ()
    plugin: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CliOption:
    """A command-line option a domain package adds to ``mobius build`` or ``mobius generate``.

    ``flags`` and ``kwargs`` are what ``argparse.add_argument`` takes (``kwargs``
    must not name ``dest``: that is ``dest`` here). ``tasks`` (build options only)
    names the tasks the option applies to: a build of another task given a
    non-default value is refused, naming the option. ``group`` titles the section
    of ``--help`` it appears under.
    """

    command: str  # "build", "generate", "classify" or a registered CommandInfo's name
    dest: str
    flags: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    tasks: tuple[str, ...] = ()
    group: str | None = None
    package: str = ""

    @property
    def default(self) -> Any:
        return self.kwargs.get("default")


@dataclass(frozen=True)
class RunnerInfo:
    """A runner for ``mobius generate`` or ``mobius classify``: ``accepts(package_dir) -> bool`` and ``run(package_dir, inputs, options) -> int``.

    ``command`` names the command it answers. ``run`` gets the command's inputs
    (``mobius generate``: the PROMPT string; ``mobius classify``: the list of INPUT
    paths or texts) and every parsed option of the command by its ``dest``
    (``max_new_tokens``, ``seed``, ``labels``, ``top``, the runner's own options...),
    and returns the exit code. Runners are asked in registration order; core's
    text runner (causal LM, seq2seq) answers ``mobius generate`` last.
    """

    name: str
    accepts: Any  # callable or lazy "module:function"
    run: Any  # callable or lazy "module:function"
    package: str
    #: A paragraph for ``mobius generate --help``: what the runner takes and does.
    help: str = ""
    #: Example command lines (without the leading two spaces) for ``--help``.
    examples: tuple[str, ...] = ()
    #: The command the runner answers: ``"generate"``, ``"classify"`` or a registered
    #: :class:`CommandInfo`'s name.
    command: str = "generate"
    #: For a :class:`CommandInfo`'s runner: the ``dest`` of each registered option of its
    #: command that it reads. Core refuses any other such option set away from its default,
    #: naming the flag and the kind of package it is for. ``None``: the runner checks.
    options: tuple[str, ...] | None = None

    def accepts_dir(self, package_dir) -> bool:
        return bool(load(self.accepts)(package_dir))

    def run_cli(self, package_dir, inputs: Any, options: dict[str, Any]) -> int:
        return load(self.run)(package_dir, inputs, options)


@dataclass(frozen=True)
class CommandInfo:
    """A top-level command a domain package adds: ``mobius NAME OUTPUT_DIR INPUT... [options]``.

    Core builds its parser (the package directory, one or more inputs, ``--threads``,
    and the :class:`CliOption` entries registered for ``name``) and runs the package
    with the first :class:`RunnerInfo` of ``command=name`` that accepts its directory,
    as ``mobius classify`` does. ``help`` is the one line of ``mobius --help``;
    ``description`` the paragraph of ``mobius NAME --help``.
    """

    name: str
    help: str
    description: str
    package: str
    inputs_metavar: str = "INPUT"
    inputs_help: str = "the input files"
    examples: tuple[str, ...] = ()

"""The build record: ``mobius.json`` in every package, and what each ONNX file says of itself.

A package says what it is: the mobius-core version and that of the domain package
that registered its model type; its source (a hub id at a commit, or the path as
given) with the SHA-256 of every weight file the build read; every build option;
its task and, per graph, the I/O contract (names, dtypes, shapes with symbolic
dims); whether the model type is verified and by which test; and each graph's file
sizes. Each ONNX file also carries ``producer_name`` ``"mobius"``, the version as
``producer_version``, and ``metadata_props`` naming its model type, task and source.

Three steps:

- :func:`describe_build`, at the end of :func:`mobius.build`, which alone knows the
  source and the options: it fills :attr:`ModelPackage.record` and the graphs'
  metadata;
- :func:`write_record`, inside :meth:`ModelPackage.save`'s staging directory (so the
  record is part of the atomic save), after the graphs: file sizes, I/O contracts
  and the hashes. Hashing streams each weight file in 1 MiB chunks on a background
  thread (:class:`FileHasher`) while the graphs are written: the build reads the same
  bytes through its memory maps, so the disk is read once when the page cache holds
  the file, and the hashing time (about 1 to 2 GB/s per file) mostly hides behind the
  writing. A second save of the same package reuses the hashes;
- :func:`read_record`, for ``mobius info PKG``: a package is a stranger's file, so
  every field's type is checked before anything is shown.

There is no timestamp, host or user in the record, and no local cache path: a
record depends only on what was built and how, so two builds of the same source
with the same options write the same bytes (the CLI and the API are compared file
by file).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

import onnx_ir as ir

from mobius.errors import MobiusError

RECORD_FILE = "mobius.json"
RECORD_FORMAT = "mobius-build-record"
SCHEMA_VERSION = 1
CORE_DISTRIBUTION = "mobius-core"

#: ``ir.Model.meta`` key of the registration a graph was built from (set by the source's build).
ENTRY_META = "mobius.registration"
#: ``ir.Value.meta`` flag of a parameter that a weightless build turned into a graph input.
PARAMETER_META = "mobius.parameter"

# A record larger than this is not one mobius wrote (a 1000-graph pipeline stays far below).
MAX_RECORD_BYTES = 16 << 20
# Build options nest two levels (quant, plugin); a plugin option's value adds a few.
MAX_OPTION_DEPTH = 8
_HASH_CHUNK = 1 << 20
# The snapshot folder of a hub cache is named by the commit it holds.
_COMMIT = re.compile(r"[0-9a-f]{40}")


def core_version() -> str:
    """The version of mobius-core."""
    from mobius import __version__

    return __version__


def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None (a package not installed as one)."""
    try:
        return metadata.version(name)
    except (metadata.PackageNotFoundError, ValueError):
        return None


# -- at build time --------------------------------------------------------------------------


def source_record(model: str | os.PathLike, path: Path, revision: str | None) -> dict[str, Any]:
    """Where the build read from: the hub id, revision and commit, or the local path as given.

    ``model`` is the argument of the build and ``path`` what it resolved to. A hub
    snapshot's folder is named by its commit; the cache path itself is this
    machine's business and is not recorded.
    """
    given = os.fspath(model)
    local = Path(given).expanduser()
    if local.is_dir() or local.is_file():
        return {"kind": "file" if local.is_file() else "directory", "path": given}
    commit = path.name if path.parent.name == "snapshots" and _COMMIT.fullmatch(path.name) else None
    return {"kind": "hub", "id": given, "revision": revision, "commit": commit}


def source_label(source: dict[str, Any]) -> str:
    """The source on one line: ``hub:org/name@commit`` or the path as given."""
    if source.get("kind") != "hub":
        return str(source.get("path"))
    at = source.get("commit") or source.get("revision")
    return f"hub:{source.get('id')}" + (f"@{at}" if at else "")


def weight_file_names(files: list[Path], root: Path) -> dict[str, Path]:
    """The weight files read, by their path relative to the source (a file source: its name)."""
    names: dict[str, Path] = {}
    for file in files:
        try:
            name = file.relative_to(root).as_posix() if root.is_dir() else file.name
        except ValueError:  # read from outside the source: name it in full
            name = str(file)
        names[name or file.name] = file
    return names


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: tuples become lists, anything else unknown its ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, ir.DataType):
        from mobius._graphs import DTYPES

        return next((name for name, dtype in DTYPES.items() if dtype == value), value.name)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [_jsonable(v) for v in items]
    return str(value)


def options_record(options, registry, task: str) -> dict[str, Any]:
    """Every build option as the build saw it, the domain packages' options under ``plugin``.

    A registered option is listed when it applies to ``task``, at its value or its
    default: the CLI passes every default and the API none, and both must record
    the same thing. An option for another task can only hold its default (the
    build refuses anything else), so it says nothing and is left out.
    """
    fields = {
        f.name: _jsonable(getattr(options, f.name))
        for f in dataclasses.fields(options)
        if f.name not in ("quant", "plugin")
    }
    fields["quant"] = _jsonable(dataclasses.asdict(options.quant))
    plugin = {}
    for option in sorted(registry.options("build"), key=lambda o: o.dest):
        if not option.tasks or task in option.tasks:
            plugin[option.dest] = _jsonable(options.plugin.get(option.dest, option.default))
    fields["plugin"] = plugin
    return fields


def _registrations(package) -> list[tuple[Any, list[str]]]:
    """The registrations a package's graphs were built from, each with its graphs' names."""
    found: dict[str, tuple[Any, list[str]]] = {}
    for name, model in package.models.items():
        entry = model.meta.get(ENTRY_META)
        if entry is not None:
            found.setdefault(entry.key, (entry, []))[1].append(name)
    return list(found.values())


def models_record(package, registry) -> list[dict[str, Any]]:
    """One row per model type in the package: who registered it, its task, its verification."""
    rows = []
    for entry, graphs in _registrations(package):
        rows.append(
            {
                "model_type": entry.key,
                "package": entry.package,
                "package_version": distribution_version(entry.package),
                "task": entry.task,
                "verified": registry.is_verified(entry.key),
                "verified_by": registry.verified_by(entry.key),
                "graphs": graphs,
            }
        )
    return rows


def describe_build(
    package, model: str | os.PathLike, path: Path, options, registry, files: list[Path]
) -> None:
    """Fill ``package.record`` and the graphs' ONNX metadata with what only the build knows.

    ``model`` is the build's argument, ``path`` its resolved local path, ``files``
    the weight files the readers opened (:func:`mobius.weights._tracking.track_reads`).
    """
    source = source_record(model, path, options.revision)
    package.weight_files = weight_file_names(files, path)
    models = models_record(package, registry)
    package.record = {
        "source": source,
        "models": models,
        "options": options_record(options, registry, package.task),
    }
    by_key = {row["model_type"]: row for row in models}
    for model_ in package.models.values():
        entry = model_.meta.get(ENTRY_META)
        row = by_key.get(entry.key) if entry is not None else None
        props = {"mobius.source": source_label(source)}
        if row is not None:
            verified = {True: "yes", False: "no", None: "unknown"}[row["verified"]]
            props.update(
                {
                    "mobius.model_type": row["model_type"],
                    "mobius.task": row["task"],
                    "mobius.registered_by": f"{row['package']} {row['package_version'] or ''}".strip(),
                    "mobius.verified": verified,
                }
            )
        model_.metadata_props.update(props)


def stamp_producer(package) -> None:
    """Every graph says mobius made it, which version, and for which task (any package, even unbuilt)."""
    version = core_version()
    for model in package.models.values():
        model.producer_name = "mobius"
        model.producer_version = version
        model.metadata_props["mobius.version"] = version
        if package.task:
            model.metadata_props.setdefault("mobius.task", package.task)


# -- at save time ---------------------------------------------------------------------------


class FileHasher:
    """SHA-256 and size of files, computed on a background thread while the caller works.

    ``cache`` maps ``(path, size, mtime_ns)`` to a digest already computed (a second
    save of the same package); it is updated with the new ones.
    """

    def __init__(self, files: dict[str, Path], cache: dict | None = None) -> None:
        self._files = files
        self._cache = cache if cache is not None else {}
        self._stop = threading.Event()
        self._results: list[dict[str, Any]] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mobius-hash", daemon=True)
        if files:
            self._thread.start()

    def _run(self) -> None:
        try:
            for name, path in self._files.items():
                self._results.append(self._hash(name, path))
        except BaseException as exc:  # re-raised in the caller's thread by result()
            self._error = exc

    def _hash(self, name: str, path: Path) -> dict[str, Any]:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._cache:
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                # update() releases the GIL on large buffers: the build runs meanwhile.
                while chunk := f.read(_HASH_CHUNK):
                    if self._stop.is_set():
                        raise InterruptedError("hashing cancelled")
                    digest.update(chunk)
            self._cache[key] = digest.hexdigest()
        return {"name": name, "bytes": stat.st_size, "sha256": self._cache[key]}

    def result(self) -> list[dict[str, Any]]:
        """The ``{"name", "bytes", "sha256"}`` of every file, in order (waits for the thread).

        Raises:
            MobiusError: A file could not be read.
        """
        if self._files:
            self._thread.join()
        if self._error is not None:
            raise MobiusError(f"cannot hash the weight files read: {self._error}") from None
        return list(self._results)

    def cancel(self) -> None:
        """Stop hashing (the save failed) and wait for the thread to notice."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def _dtype_name(dtype: ir.DataType | None) -> str | None:
    if dtype is None:
        return None
    try:
        return dtype.numpy().name  # float32, int64, bfloat16...
    except Exception:  # a type numpy cannot hold
        return dtype.name.lower()


def value_record(value: ir.Value) -> dict[str, Any]:
    """A graph input or output: name, dtype, shape (ints, symbolic names, None where unknown)."""
    shape = None
    if value.shape is not None:
        shape = [d if isinstance(d, int) else d.value for d in value.shape]
    return {"name": value.name, "dtype": _dtype_name(value.dtype), "shape": shape}


def graph_record(name: str, model: ir.Model, directory: Path) -> dict[str, Any]:
    """A saved graph: its files and their sizes, its opset and its I/O contract."""
    path = directory / f"{name}.onnx"
    data = path.with_name(f"{path.name}.data")
    inputs = [v for v in model.graph.inputs if not v.meta.get(PARAMETER_META)]
    return {
        "file": f"{name}.onnx",
        "bytes": path.stat().st_size,
        "data_file": f"{name}.onnx.data" if data.is_file() else None,
        "data_bytes": data.stat().st_size if data.is_file() else 0,
        "opset": model.opset_imports.get(""),
        "inputs": [value_record(v) for v in inputs],
        "outputs": [value_record(v) for v in model.graph.outputs],
        "parameters_as_inputs": len(model.graph.inputs) - len(inputs),
    }


def make_record(package, directory: Path, files: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole record of ``package`` saved in ``directory``; ``files`` are the hashed weight files."""
    record = dict(package.record)
    versions = {CORE_DISTRIBUTION: core_version()}
    for row in record.get("models", []):
        versions.setdefault(row["package"], row["package_version"])
    source = record.get("source")
    if source is not None:
        source = {**source, "files": files}
    return {
        "format": RECORD_FORMAT,
        "schema": SCHEMA_VERSION,
        "versions": versions,
        "task": package.task,
        "source": source,
        "models": record.get("models", []),
        "options": record.get("options"),
        "graphs": {
            name: graph_record(name, model, directory) for name, model in package.models.items()
        },
    }


def dumps(value: Any, indent: str = "") -> str:
    """JSON indented by two spaces, with small leaves on one line (a shape, an I/O value, a file)."""
    flat = json.dumps(value, ensure_ascii=False)
    nested = isinstance(value, (dict, list)) and any(
        isinstance(v, dict) or (isinstance(v, list) and any(isinstance(i, (dict, list)) for i in v))
        for v in (value.values() if isinstance(value, dict) else value)
    )
    if not isinstance(value, (dict, list)) or (not nested and len(flat) <= 100):
        return flat
    inner = indent + "  "
    if isinstance(value, dict):
        items = [
            f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, inner)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    items = [f"{inner}{dumps(v, inner)}" for v in value]
    return "[\n" + ",\n".join(items) + f"\n{indent}]"


def write_record(package, directory: Path, hasher: FileHasher) -> None:
    """Write ``mobius.json`` into ``directory``, where the package's graphs already are."""
    record = make_record(package, directory, hasher.result())
    (directory / RECORD_FILE).write_text(dumps(record) + "\n", encoding="utf-8")


# -- reading one back -----------------------------------------------------------------------


class RecordError(MobiusError):
    """A ``mobius.json`` that is unreadable or not what mobius writes."""


# What each field must be: a type, a tuple of alternatives, [spec] for a list,
# {str: spec} for a mapping with any keys, or a dict of named fields (all required;
# others are kept, for a newer minor writer, but not shown).
_OPT_STR = (str, None)
_VALUE = {"name": str, "dtype": _OPT_STR, "shape": (None, [(int, str, None)])}
_FILE = {"name": str, "bytes": int, "sha256": str}
_SOURCE = {"kind": str, "files": [_FILE]}
_MODEL = {
    "model_type": str,
    "package": str,
    "package_version": _OPT_STR,
    "task": str,
    "verified": (bool, None),
    "verified_by": _OPT_STR,
    "graphs": [str],
}
_GRAPH = {
    "file": str,
    "bytes": int,
    "data_file": _OPT_STR,
    "data_bytes": int,
    "opset": (int, None),
    "inputs": [_VALUE],
    "outputs": [_VALUE],
    "parameters_as_inputs": int,
}
_SCHEMA = {
    "format": str,
    "schema": int,
    "versions": {str: _OPT_STR},
    "task": str,
    "source": (None, _SOURCE),
    "models": [_MODEL],
    "options": (None, dict),
    "graphs": {str: _GRAPH},
}
# The source fields each kind has.
_SOURCE_KINDS = {
    "hub": {"id": str, "revision": _OPT_STR, "commit": _OPT_STR},
    "directory": {"path": str},
    "file": {"path": str},
}


def _depth(value: Any) -> int:
    """How deep lists and objects nest in ``value`` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is not None:
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _describe(spec: Any) -> str:
    if spec is None:
        return "null"
    if isinstance(spec, type):
        return {str: "a string", int: "an integer", bool: "true or false", dict: "an object"}.get(
            spec, spec.__name__
        )
    if isinstance(spec, tuple):
        return " or ".join(_describe(s) for s in spec)
    return "a list" if isinstance(spec, list) else "an object"


def _matches(value: Any, spec: Any, where: str) -> bool:
    """Whether ``value`` fits ``spec``; raises RecordError for a fitting kind with bad insides."""
    if spec is None:
        return value is None
    if isinstance(spec, type):
        if spec is int:  # JSON true is not a number
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, spec)
    if isinstance(spec, tuple):
        return any(_matches(value, s, where) for s in spec)
    if isinstance(spec, list):
        if not isinstance(value, list):
            return False
        for i, item in enumerate(value):
            _check(item, spec[0], f"{where}[{i}]")
        return True
    if not isinstance(value, dict):
        return False
    if list(spec) == [str]:
        for key, item in value.items():
            _check(item, spec[str], f"{where}.{key}")
        return True
    for key, field_spec in spec.items():
        if key not in value:
            raise RecordError(f"{where or 'the record'} has no {key!r}")
        _check(value[key], field_spec, f"{where}.{key}" if where else key)
    return True


def _check(value: Any, spec: Any, where: str) -> None:
    if not _matches(value, spec, where):
        raise RecordError(f"{where} must be {_describe(spec)}, not {type(value).__name__}")


def validate_record(record: Any) -> dict[str, Any]:
    """``record`` if it has every field of a record this mobius writes, each of the right type.

    Raises:
        RecordError: It does not (the message names the first bad field).
    """
    if not isinstance(record, dict):
        raise RecordError("the record is not a JSON object")
    if record.get("format") != RECORD_FORMAT:
        raise RecordError(f"format is {record.get('format')!r}, not {RECORD_FORMAT!r}")
    schema = record.get("schema")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA_VERSION:
        raise RecordError(
            f"schema {schema} is newer than this mobius reads ({SCHEMA_VERSION}): upgrade "
            "mobius-core, or read the file itself"
        )
    _check(record, _SCHEMA, "")
    if _depth(record["options"]) > MAX_OPTION_DEPTH:
        raise RecordError(f"options nest deeper than {MAX_OPTION_DEPTH} levels")
    source = record["source"]
    if source is not None:
        kind = _SOURCE_KINDS.get(source["kind"])
        if kind is None:
            raise RecordError(
                f"source.kind {source['kind']!r} is not one of {sorted(_SOURCE_KINDS)}"
            )
        _check(source, kind, "source")
    return record


def read_record(directory: Path) -> dict[str, Any]:
    """The validated ``mobius.json`` of a package directory.

    Raises:
        RecordError: The file is missing, too large, not JSON, or not a record.
    """
    path = directory / RECORD_FILE
    if not path.is_file():  # a device or a pipe (a link to /dev/zero) would never end
        raise RecordError(f"{path} is not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_RECORD_BYTES + 1)
        if len(data) > MAX_RECORD_BYTES:
            raise RecordError(f"{path} is larger than {MAX_RECORD_BYTES >> 20} MiB: not a record")
        record = json.loads(data.decode("utf-8"))
    except RecordError:
        raise
    except (OSError, ValueError, RecursionError) as exc:
        raise RecordError(f"cannot read {path}: {exc}") from None
    try:
        return validate_record(record)
    except RecordError as exc:
        raise RecordError(f"{path} is not a valid build record: {exc}") from None


def is_package(directory: Path) -> bool:
    """Whether ``directory`` is a built package rather than a source: it has a record or graphs.

    Graphs are ``model.onnx`` at the top, or ``<component>/model.onnx`` without a
    ``config.json`` beside them: a hub repository that ships ``onnx/model.onnx``
    next to its ``config.json`` is a source.
    """
    if (directory / RECORD_FILE).exists() or (directory / "model.onnx").is_file():
        return True
    return not (directory / "config.json").exists() and any(directory.glob("*/model.onnx"))


# -- showing one ----------------------------------------------------------------------------


def _safe(value: Any) -> str:
    """``value`` as text with control characters escaped: a record must not drive the terminal."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _flat(options: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Options as ``(dotted.name, text)`` rows: ``quant.method``, ``plugin.form``; null reads "not set"."""
    rows = []
    for name, value in options.items():
        if isinstance(value, dict):
            rows += _flat(value, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", "not set" if value is None else _safe(value)))
    return rows


def _value_line(value: dict[str, Any], width: int) -> str:
    shape = "?" if value["shape"] is None else ", ".join(_safe(d) for d in value["shape"])
    return f"{_safe(value['name']):<{width}}  {_safe(value['dtype'] or '?')} [{shape}]"


def _source_lines(source: dict[str, Any] | None) -> list[str]:
    if source is None:
        return ["source            not recorded (built from a module, not by mobius.build)"]
    if source["kind"] == "hub":
        at = f" at {_safe(source['revision'])}" if source["revision"] else ""
        commit = f", commit {_safe(source['commit'])}" if source["commit"] else ""
        lines = [f"source            hub {_safe(source['id'])}{at}{commit}"]
    else:
        lines = [f"source            {source['kind']} {_safe(source['path'])}"]
    if not source["files"]:
        lines.append("  (no weight files read)")
    for file in source["files"]:
        lines.append(
            f"  {_safe(file['name'])}  {_bytes(file['bytes'])}  sha256 {_safe(file['sha256'])}"
        )
    return lines


def _model_lines(models: list[dict[str, Any]]) -> list[str]:
    lines = []
    for row in models:
        version = f" {_safe(row['package_version'])}" if row["package_version"] else ""
        graphs = (
            f" (graphs: {', '.join(_safe(g) for g in row['graphs'])})" if len(models) > 1 else ""
        )
        lines.append(
            f"model type        {_safe(row['model_type'])}, registered by "
            f"{_safe(row['package'])}{version}, task {_safe(row['task'])}{graphs}"
        )
        if row["verified"] is None:
            verified = "unknown (its package publishes no verified list)"
        elif row["verified"]:
            verified = f"yes, by {_safe(row['verified_by'] or 'its package parity suite')}"
        else:
            verified = "no: registered, not (yet) verified by its package's parity tests"
        lines.append(f"  verified        {verified}")
    return lines


def _graph_lines(graphs: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["graphs"]
    for name, graph in graphs.items():
        files = f"{_safe(graph['file'])} {_bytes(graph['bytes'])}"
        if graph["data_file"]:
            files += f" + {_safe(graph['data_file'])} {_bytes(graph['data_bytes'])}"
        opset = f", opset {graph['opset']}" if graph["opset"] is not None else ""
        lines.append(f"  {_safe(name)}: {files}{opset}")
        values = graph["inputs"] + graph["outputs"]
        width = max((len(_safe(v["name"])) for v in values), default=0)
        for kind in ("inputs", "outputs"):
            for i, value in enumerate(graph[kind]):
                label = kind if i == 0 else ""
                lines.append(f"    {label:<8} {_value_line(value, width)}")
        if graph["parameters_as_inputs"]:
            lines.append(
                f"    (and {graph['parameters_as_inputs']} parameters as inputs: no weights)"
            )
    return lines


def format_record(record: dict[str, Any], directory: Path | str) -> str:
    """The readable block that ``mobius info PKG`` prints for a validated record."""
    versions = ", ".join(f"{_safe(k)} {_safe(v or '?')}" for k, v in record["versions"].items())
    lines = [
        f"package           {_safe(str(directory))}",
        f"built by          {versions}",
        f"task              {_safe(record['task'])}",
        *_model_lines(record["models"]),
        *_source_lines(record["source"]),
    ]
    if record["options"] is not None:
        lines.append("build options")
        rows = _flat(record["options"])
        width = max((len(name) for name, _ in rows), default=0)
        lines += [f"  {_safe(name):<{width}}  {value}" for name, value in rows]
    total = sum(g["bytes"] + g["data_bytes"] for g in record["graphs"].values())
    lines += _graph_lines(record["graphs"])
    lines.append(f"total             {_bytes(total)} in graphs")
    lines += _validation_lines(record.get("validation"))
    return "\n".join(lines)


def _validation_lines(validation: Any) -> list[str]:
    """``mobius build --validate``'s verdict, where the record holds a well-formed one."""
    if not isinstance(validation, dict) or not isinstance(validation.get("passed"), bool):
        return []
    verdict = "passed" if validation["passed"] else "FAILED"
    reference = validation.get("reference")
    against = f"against {_safe(reference)}" if isinstance(reference, str) else "smoke inference"
    diffs = validation.get("diffs")
    worst = ""
    if (
        isinstance(diffs, dict)
        and diffs
        and all(isinstance(v, (int, float)) for v in diffs.values())
    ):
        worst = f", max abs diff {max(diffs.values()):.3g}"
    return [f"validated         {verdict} ({against}{worst})"]

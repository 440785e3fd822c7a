"""A new domain package is written without touching core: a toy plugin, installed as a distribution.

The toy lives in a temporary folder as a real distribution (``toy_mobius`` with a
``.dist-info`` declaring a ``mobius.plugins`` entry point), found by core's
entry-point discovery in a fresh ``mobius`` process. It registers one of each:
a model type, a task (a graph ``y = x * weight * scale``), a source recogniser
(``*.toy.json`` files holding config and weights), a build option
(``--toy-scale``, read by the task), a runner for ``mobius generate`` and one for
``mobius classify`` with an option of its own (``--toy-upper``), and a command of its
own (``mobius toy-count``) with its option and runner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TOY_MODEL = '''
"""The toy family: its config and model (imported only when a build needs them)."""

from onnxscript import nn

from mobius.model import Model


class ToyConfig:
    def __init__(self, size, scale=1.0):
        self.size, self.scale, self.model_type = size, scale, "toy"

    @classmethod
    def from_hf(cls, fields):
        return cls(int(fields["size"]))


class ToyModel(Model):
    task = "toy-task"
    config_class = ToyConfig

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.weight = nn.Parameter([config.size])

    def forward(self, op, x):
        return op.Mul(op.Mul(x, self.weight), op.Constant(value_float=self.config.scale))
'''

TOY_PACKAGE = '''
"""A toy mobius domain package: everything a domain registers (nothing heavy at import)."""

import json
from pathlib import Path

from mobius.plugins import CliOption, CommandInfo, RunnerInfo, SourceInfo, TaskInfo

PACKAGE = "toy-mobius"


def register(registry):
    registry.register("toy", "toy_mobius.model:ToyModel", task="toy-task", package=PACKAGE)
    registry.register_task(TaskInfo("toy-task", "toy_mobius:ToyTask", PACKAGE))
    registry.register_source(SourceInfo("toy-file", "toy_mobius:recognise", PACKAGE))
    registry.register_option(
        CliOption(
            "build",
            "toy_scale",
            ("--toy-scale",),
            {"type": float, "default": 1.0, "help": "toy models: multiply the output by S"},
            tasks=("toy-task",),
            package=PACKAGE,
        )
    )
    registry.register_runner(
        RunnerInfo(
            "toy",
            "toy_mobius:accepts",
            "toy_mobius:run",
            PACKAGE,
            help="A toy package (toy.json) doubles PROMPT's length.",
            examples=("mobius generate toy-out/ hello",),
        )
    )
    registry.register_option(
        CliOption(
            "classify",
            "toy_upper",
            ("--toy-upper",),
            {"action": "store_true", "help": "toy classifiers: print labels in capitals"},
            package=PACKAGE,
        )
    )
    registry.register_runner(
        RunnerInfo(
            "toy-classifier",
            "toy_mobius:accepts",
            "toy_mobius:classify",
            PACKAGE,
            help="A toy package (toy.json) labels each INPUT by its length.",
            examples=("mobius classify toy-out/ a.png",),
            command="classify",
        )
    )
    registry.register_command(
        CommandInfo(
            "toy-count",
            "count the letters of words with a toy package",
            "Print the length of each WORD, as a toy package counts it.",
            PACKAGE,
            inputs_metavar="WORD",
            inputs_help="the words to count",
            examples=("mobius toy-count toy-out/ hello",),
        )
    )
    registry.register_option(
        CliOption(
            "toy-count",
            "toy_times",
            ("--toy-times",),
            {"type": int, "default": 1, "help": "toy counts: multiply each count by N"},
            package=PACKAGE,
        )
    )
    registry.register_option(  # read by no runner of the toy's: refused when set
        CliOption(
            "toy-count",
            "toy_shout",
            ("--toy-shout",),
            {"action": "store_true", "help": "shouting counters: print in capitals"},
            group="shouting counters",
            package=PACKAGE,
        )
    )
    registry.register_runner(
        RunnerInfo(
            "toy-counter",
            "toy_mobius:accepts",
            "toy_mobius:count",
            PACKAGE,
            command="toy-count",
            options=("toy_times",),
        )
    )


class ToyTask:
    name = "toy-task"
    genai = False

    def __init__(self, ep="default"):
        self.ep = ep

    def configure(self, config, options, source):
        config.scale = float(options.plugin.get("toy_scale", 1.0))
        return config

    def build(self, module, config, dtype):
        import onnx_ir as ir

        from mobius.tasks import new_graph, set_output

        graph, builder = new_graph("toy", self.ep)
        x = builder.input("x", dtype, [config.size])
        set_output(builder, module(builder.op, x), "y", dtype, [config.size])
        return {"model": ir.Model(graph, ir_version=10)}


def recognise(path, options, registry):
    if not path.name.endswith(".toy.json"):
        return None
    import numpy as np
    import onnx_ir as ir

    from mobius.source import ModelSource
    from mobius.weights import DerivedTensor

    fields = json.loads(path.read_text())
    weight = np.asarray(fields["weight"], np.float32)
    tensor = DerivedTensor(lambda: weight, weight.shape, ir.DataType.FLOAT)
    return ModelSource(
        path=path,
        entry=registry.get("toy"),
        hf_config=fields,
        checkpoint=lambda: {"weight": tensor},
        text_files={"toy.json": json.dumps({"model_type": "toy"})},
    )


def accepts(package_dir):
    return (Path(package_dir) / "toy.json").is_file()


def run(package_dir, prompt, options):
    print(prompt * 2)
    return 0


def classify(package_dir, inputs, options):
    for item in inputs:
        label = f"len{len(item)}"
        print(f"{item}: {label.upper() if options['toy_upper'] else label} top{options['top']}")
    return 0


def count(package_dir, inputs, options):
    print(" ".join(str(len(word) * options["toy_times"]) for word in inputs), options["threads"])
    return 0
'''


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory) -> Path:
    """A folder holding the toy distribution as an installer would lay it out."""
    site = tmp_path_factory.mktemp("toy-site")
    (site / "toy_mobius").mkdir()
    (site / "toy_mobius" / "__init__.py").write_text(TOY_PACKAGE)
    (site / "toy_mobius" / "model.py").write_text(TOY_MODEL)
    info = site / "toy_mobius-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-mobius\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[mobius.plugins]\ntoy = toy_mobius:register\n")
    return site


def mobius(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-m", "mobius", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_toy_plugin_builds_lists_and_runs(toy_site, tmp_path):
    source = tmp_path / "model.toy.json"
    source.write_text(json.dumps({"size": 3, "weight": [1.0, 2.0, 3.0]}))
    out = tmp_path / "out"

    listed = mobius(toy_site, "list")
    assert listed.returncode == 0, listed.stderr
    assert "toy-mobius (1)" in listed.stdout and "toy-task" in listed.stdout

    help_text = mobius(toy_site, "build", "--help").stdout
    assert "--toy-scale" in help_text and "toy models: multiply" in help_text
    assert "doubles PROMPT" in mobius(toy_site, "generate", "--help").stdout

    built = mobius(toy_site, "build", "--model", str(source), str(out), "--toy-scale", "2", "-q")
    assert built.returncode == 0, built.stderr
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(out / "model.onnx"))
    (y,) = session.run(None, {"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(
        y, [2.0, 4.0, 6.0]
    )  # weight from the source, scale from the option

    ran = mobius(toy_site, "generate", str(out), "ab")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "abab"

    assert "labels each INPUT" in mobius(toy_site, "classify", "--help").stdout
    classified = mobius(toy_site, "classify", str(out), "ab", "abc", "--toy-upper", "--top", "2")
    assert classified.returncode == 0, classified.stderr
    assert classified.stdout.splitlines() == ["ab: LEN2 top2", "abc: LEN3 top2"]

    assert "count the letters" in mobius(toy_site, "--help").stdout
    count_help = mobius(toy_site, "toy-count", "--help").stdout
    assert "--toy-times" in count_help and "mobius toy-count toy-out/ hello" in count_help
    counted = mobius(toy_site, "toy-count", str(out), "ab", "abc", "--toy-times", "2")
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.strip() == "4 6 None"
    unread = mobius(toy_site, "toy-count", str(out), "ab", "--toy-shout")
    assert unread.returncode == 1
    assert f"--toy-shout applies to shouting counters; {out} is not one (toy-counter)" in (
        unread.stderr
    )
    refused = mobius(toy_site, "toy-count", str(tmp_path), "ab")
    assert refused.returncode == 1
    assert "no runner of 'mobius toy-count' accepts" in refused.stderr
    assert "toy-counter" in refused.stderr


def test_classify_refuses_a_package_no_classifier_accepts(toy_site, tmp_path):
    (tmp_path / "pkg").mkdir()
    result = mobius(toy_site, "classify", str(tmp_path / "pkg"), "a.png")
    assert result.returncode == 1
    assert "no classifier accepts" in result.stderr and "toy-classifier" in result.stderr
    result = mobius(toy_site, "classify", str(tmp_path / "pkg"), "a.png", "--top", "0")
    assert "--top must be at least 1" in result.stderr


def test_toy_option_refused_for_other_tasks(toy_site, tmp_path):
    """A plugin's build option set for a model of another task is refused, naming the flag."""
    from mobius_text.testing import write_tiny_llama

    source = write_tiny_llama(tmp_path / "llama")
    result = mobius(
        toy_site, "build", "--model", str(source), str(tmp_path / "o"), "--toy-scale", "3"
    )
    assert result.returncode == 1
    assert "--toy-scale applies to toy-task models" in result.stderr
    assert not (tmp_path / "o").exists()


def test_toy_plugin_absent_without_its_distribution(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = mobius(empty, "build", "--help")
    assert result.returncode == 0 and "--toy-scale" not in result.stdout


def test_domain_commands_cannot_take_core_names_or_unknown_commands():
    from mobius._registry import Registry
    from mobius.plugins import CliOption, CommandInfo, RunnerInfo

    registry = Registry(discover=False)
    with pytest.raises(ValueError, match="one of core's own"):
        registry.register_command(CommandInfo("build", "h", "d", "p"))
    with pytest.raises(ValueError, match="command 'nope' is not one of"):
        registry.register_option(CliOption("nope", "x", ("--x",), package="p"))
    with pytest.raises(ValueError, match="command 'nope' is not one of"):
        registry.register_runner(RunnerInfo("r", "m:a", "m:r", "p", command="nope"))

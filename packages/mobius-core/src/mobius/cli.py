"""The ``mobius`` command line."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import traceback

from mobius import __version__
from mobius._huge_pages import reexec_with_huge_pages
from mobius.errors import MobiusError
from mobius.options import (
    DTYPE_NAMES,
    EXECUTION_PROVIDERS,
    OPSETS,
    POOLING_MODES,
    QUANT_METHODS,
    QUANT_MIXES,
    ROUNDING_METHODS,
    RUNTIMES,
    canonical_dtype,
)

EPILOG = """examples:
  mobius build --model HuggingFaceTB/SmolLM2-135M-Instruct out/
  mobius build --model ./my-checkpoint out/ --dtype f16
  mobius build --model ./my-checkpoint out/ --ep cpu --quant int4
  mobius build --model ./my-checkpoint out/ --adapter ./my-lora
  mobius build --model ./my-checkpoint out/ --adapter ./lora-a,./lora-b --adapter-inputs
  mobius generate out/ "The capital of France is" --max-new-tokens 32
  mobius embed minilm-out/ "The capital of France is Paris."
  mobius classify vit-out/ cat.png
  mobius list

environment:
  MOBIUS_HUGE_PAGES=0  do not re-execute mobius generate with glibc's huge-page
                       tunable (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), which puts
                       the weights on 2 MiB pages on Linux (glibc 2.35+, transparent
                       huge pages in madvise mode) for faster decoding
"""


# The dests of mobius build's own options, as BuildOptions reads them; the rest are plugins'.
_CORE_BUILD_DESTS = {
    "model", "output", "dtype", "ep", "runtime", "no_weights", "quant", "no_quant_lm_head",
    "quant_embeddings", "requantize", "block_size", "symmetric", "accuracy_level", "revision", "head",
    "quant_method", "quant_mix", "validate", "atol", "opset",
    "pooling", "normalize", "overwrite", "allow_pickle", "quiet", "verbose", "run", "command",
    "model_type", "adapter", "adapter_inputs",
}  # fmt: skip


def _directories(text: str) -> list[str]:
    """``--adapter A,B``: the comma-separated directories, none empty."""
    paths = text.split(",")
    if not all(paths):
        raise argparse.ArgumentTypeError(f"{text!r} holds an empty directory name")
    return paths


def build_options(args: argparse.Namespace):
    """The :class:`~mobius.options.BuildOptions` of parsed ``mobius build`` arguments."""
    from mobius.options import BuildOptions, QuantOptions

    plugin = {k: v for k, v in vars(args).items() if k not in _CORE_BUILD_DESTS}
    return BuildOptions(
        dtype=args.dtype,
        ep=args.ep,
        load_weights=not args.no_weights,
        runtime=args.runtime,
        opset=args.opset,
        adapters=tuple(path for paths in args.adapter or () for path in paths),
        adapter_inputs=args.adapter_inputs,
        revision=args.revision,
        allow_pickle=args.allow_pickle,
        model_type=args.model_type,
        head=args.head,
        pooling=args.pooling,
        normalize=args.normalize,
        quant=QuantOptions(
            method=args.quant,
            block_size=args.block_size,
            symmetric=args.symmetric,
            accuracy_level=args.accuracy_level,
            lm_head=not args.no_quant_lm_head,
            embeddings=args.quant_embeddings,
            requantize=args.requantize,
            rounding=args.quant_method,
            mix=args.quant_mix,
        ),
        plugin=plugin,
    )


def _build(args: argparse.Namespace) -> int:
    from mobius._build import build
    from mobius._package import check_output, output_lock

    # Refuse before a long build; the package's save checks again with what the build read
    # (a hub id's snapshot is known only then).
    local = [args.model, *(path for paths in args.adapter or () for path in paths)]
    sources = [path for path in local if os.path.exists(path)]
    check_output(args.output, overwrite=args.overwrite, sources=sources)
    options = build_options(args)
    if args.atol is not None and not args.validate:
        raise MobiusError("--atol is the tolerance of --validate: give --validate too")
    if args.validate and not options.load_weights:
        raise MobiusError("--validate needs the weights: drop --no-weights")
    if args.validate and options.adapters and not options.adapter_inputs:
        raise MobiusError(
            "--validate compares with the source model, which lacks the merged --adapter; "
            "drop --validate (mobius-text's tests check merged adapters against peft)"
        )
    with output_lock(args.output):  # one build per output: a second one fails at once
        package = build(args.model, options)
        out = package.save(args.output, progress=not args.quiet, overwrite=args.overwrite)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({_megabytes(size)})")
    if args.validate:
        _validate(out, package.source_path, args.atol)
    if (
        options.quant.method is None
        and options.load_weights
        and size > QUANT_HINT_BYTES
        and not any(
            node.op_type == "MatMulNBits"
            for model in package.models.values()
            for node in model.graph
        )
    ):
        print(
            "mobius: note: its weights are floats; --quant int4 stores MatMul weights in 4-bit "
            "blocks, about a quarter of an f16 build",
            file=sys.stderr,
        )
    return 0


def _validate(out, source, atol: float | None) -> None:
    """Run ``--validate`` on the saved package and print its report; a failure is an error."""
    from mobius.validate import validate_package

    report = validate_package(out, source, atol=atol)
    print(report.summary())
    if not report.passed:
        raise MobiusError(
            f"validation failed: {'; '.join(report.failures())} (the package is kept in {out})"
        )


#: A float build larger than this gets a note suggesting ``--quant int4``.
QUANT_HINT_BYTES = 2**28


def _megabytes(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def _generate(args: argparse.Namespace) -> int:
    from mobius._registry import registry
    from mobius.generate import run_text_cli

    options = vars(args)
    for runner in registry.runners():
        if runner.accepts_dir(args.output):
            return runner.run_cli(args.output, args.prompt, options)
    return run_text_cli(args.output, args.prompt, options)


def _classify(args: argparse.Namespace) -> int:
    from mobius._registry import registry

    if args.top < 1:
        raise MobiusError(f"--top must be at least 1, not {args.top}")
    for runner in registry.runners("classify"):
        if runner.accepts_dir(args.output):
            return runner.run_cli(args.output, args.inputs, vars(args))
    installed = ", ".join(r.name for r in registry.runners("classify")) or "none installed"
    raise MobiusError(
        f"no classifier accepts {args.output} (classifiers: {installed}); a text "
        "classifier or reranker runs with 'mobius embed', a causal LM with 'mobius generate'"
    )


def _run_domain_command(args: argparse.Namespace) -> int:
    """``mobius NAME OUTPUT_DIR INPUT...`` of a domain's command: its first accepting runner."""
    from mobius._registry import registry

    runners = registry.runners(args.command)
    for runner in runners:
        if runner.accepts_dir(args.output):
            _refuse_unread_options(runner, args)
            return runner.run_cli(args.output, args.inputs, vars(args))
    installed = ", ".join(r.name for r in runners) or "none installed"
    raise MobiusError(
        f"no runner of 'mobius {args.command}' accepts {args.output} (runners: {installed}); "
        "'mobius info' on the package says what it is"
    )


def _refuse_unread_options(runner, args: argparse.Namespace) -> None:
    """Refuse an option of the command that ``runner`` does not read, set by the user."""
    from mobius._registry import registry

    if runner.options is None:
        return
    for option in registry.options(args.command):
        given = getattr(args, option.dest) != args.unset_options.get(option.dest)
        if option.dest not in runner.options and given:
            kind = option.group or "other packages"
            raise MobiusError(
                f"{option.flags[0]} applies to {kind}; {args.output} is not one ({runner.name})"
            )


def _embed(args: argparse.Namespace) -> int:
    from mobius.embedding import run_cli

    return run_cli(args.output, args.texts, args.save_to, threads=args.threads, query=args.query)


def _list(args: argparse.Namespace) -> int:
    from mobius._registry import registry

    grouped = registry.by_package()
    width = max((len(e.key) for entries in grouped.values() for e in entries), default=0)
    for package in sorted(grouped):
        entries = grouped[package]
        print(f"{package} ({len(entries)})")
        for entry in entries:
            print(f"  {entry.key:<{width}}  {entry.task}")  # long keys keep the column
    if not grouped:
        print("no architectures registered: install a domain package such as mobius-text")
    for dist, error in registry.plugin_errors.items():
        print(f"plugin {dist} failed to load: {error}", file=sys.stderr)
    return 0


def _info(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from mobius._info import format_info, model_info
    from mobius._record import is_package
    from mobius.errors import ModelSourceError

    path = Path(args.model).expanduser()
    if path.is_dir() and is_package(path):
        return _package_info(args, path)
    try:
        info = model_info(args.model, revision=args.revision)
    except ModelSourceError as exc:
        if path.is_dir() and not (path / "config.json").exists():
            raise ModelSourceError(
                f"{args.model} is neither a package built by mobius (no mobius.json, no .onnx "
                f"graphs) nor a model source that an installed mobius package reads: {exc}"
            ) from None
        raise
    print(json.dumps(info.as_dict(), indent=2) if args.json else format_info(info))
    return 0


def _package_info(args: argparse.Namespace, path) -> int:
    """``mobius info PKG``: the build record of a package that ``mobius build`` wrote."""
    import json

    from mobius._record import RECORD_FILE, format_record, read_record

    if args.revision is not None:
        raise MobiusError("--revision is for hub ids; a built package records its own source")
    if not (path / RECORD_FILE).exists():
        if (path.parent / RECORD_FILE).is_file():
            raise MobiusError(
                f"{args.model} is one part of the package {path.parent}, whose {RECORD_FILE} "
                f"describes it: mobius info {path.parent}"
            )
        raise MobiusError(
            f"{args.model} holds ONNX graphs but no {RECORD_FILE}: an older mobius or another "
            "tool wrote it, so nothing records how it was built; build it again with mobius "
            "build for a record"
        )
    record = read_record(path)
    # ensure_ascii: a stranger's record must not put control characters on the terminal.
    print(json.dumps(record, indent=2) if args.json else format_record(record, args.model))
    return 0


def _add_plugin_options(parser, options, command: str) -> None:
    """Add the options domain packages registered for ``command``, grouped as they ask."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for option in options:
        if option.command != command:
            continue
        target = parser
        if option.group:
            target = groups.get(option.group) or parser.add_argument_group(option.group)
            groups[option.group] = target
        target.add_argument(*option.flags, dest=option.dest, **option.kwargs)


def _add_domain_command(commands, common, info, plugin_options, runners) -> None:
    """Add a domain package's command (a :class:`mobius.plugins.CommandInfo`) to ``commands``."""
    examples = (*info.examples, *(e for r in runners for e in r.examples))
    parser = commands.add_parser(
        info.name,
        help=info.help,
        description=info.description
        + "\nNeeds ONNX Runtime: pip install mobius-core[run]"
        + "".join(f"\n\n{r.help}" for r in runners if r.help),
        epilog="".join(f"  {e}\n" for e in examples)
        and "examples:\n" + "".join(f"  {e}\n" for e in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("output", metavar="OUTPUT_DIR", help="package written by mobius build")
    parser.add_argument("inputs", metavar=info.inputs_metavar, nargs="+", help=info.inputs_help)
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N", help="ONNX Runtime intra-op threads"
    )
    _add_plugin_options(parser, plugin_options, info.name)
    # What each option is when not given (argparse's: False for a store_true flag).
    unset = {o.dest: parser.get_default(o.dest) for o in plugin_options if o.command == info.name}
    parser.set_defaults(run=_run_domain_command, unset_options=unset)


def make_parser(plugins: bool = True) -> argparse.ArgumentParser:
    """The ``mobius`` argument parser; ``plugins=False`` leaves out the domain packages' options.

    Without plugins nothing is imported beyond the standard library and mobius's
    light modules: ``mobius --help`` and ``mobius --version`` need no more.
    """
    plugin_options, heads, runners, classifiers, source_help = [], ["none"], [], [], ""
    domain_commands, domain_runners = [], {}
    if plugins:
        from mobius._registry import registry

        domain_commands = registry.commands()
        names = ("build", "generate", "classify", *(c.name for c in domain_commands))
        plugin_options = [o for c in names for o in registry.options(c)]
        runners = registry.runners()
        classifiers = registry.runners("classify")
        domain_runners = {c.name: registry.runners(c.name) for c in domain_commands}
        source_help = "".join(f"\n\n{s.help}" for s in registry.sources() if s.help)
        for info in registry.tasks().values():
            heads += [h for h in info.heads if h not in heads]
    parser = argparse.ArgumentParser(
        prog="mobius",
        description="Build ONNX models for generative-AI architectures from HuggingFace checkpoints.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mobius {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", help="on an error, also print its traceback"
    )

    build = commands.add_parser(
        "build",
        help="build an ONNX model from a HuggingFace model id or a local directory",
        description=(
            "Build MODEL into OUTPUT_DIR: model.onnx, model.onnx.data (external weights), "
            "and the config, generation config and tokenizer files. The output appears "
            "only once complete: a failure or Ctrl-C leaves nothing. A non-empty "
            "OUTPUT_DIR is refused unless --overwrite, and always when it is, holds or lies "
            "inside the model, or is or holds the current or home directory. One build at "
            "a time writes an OUTPUT_DIR." + source_help
        ),
        parents=[common],
    )
    build.add_argument(
        "--model",
        required=True,
        metavar="ID_OR_DIR",
        help="HuggingFace model id (downloaded, or read from the cache with HF_HUB_OFFLINE=1) "
        "or a local directory with config.json and *.safetensors",
    )
    build.add_argument("output", metavar="OUTPUT_DIR", help="directory to write")
    build.add_argument(
        "--dtype",
        type=canonical_dtype,
        choices=list(DTYPE_NAMES),
        default=None,
        help="floating-point type of weights and compute (default: the checkpoint's own); "
        "fp32/float32, fp16/float16/half and bfloat16 are accepted too",
    )
    build.add_argument(
        "--ep",
        choices=list(EXECUTION_PROVIDERS),
        default="default",
        help="runtime target: 'default' is portable standard ONNX; 'cpu' and 'cuda' use ONNX "
        "Runtime's fused kernels (GroupQueryAttention with rotary inside, "
        "SkipSimplifiedLayerNormalization), faster but ONNX Runtime only (default: default)",
    )
    build.add_argument(
        "--runtime",
        choices=list(RUNTIMES),
        default="auto",
        help="what runs the package. 'ort-genai' also writes genai_config.json, so that "
        "onnxruntime-genai's generator loads the package as is; it fails for models the "
        "generator cannot run (only causal LMs with a key/value cache on every layer). "
        "'onnx' writes the graph alone, for any ONNX runtime. 'auto' (default) writes "
        "genai_config.json whenever the model qualifies and says why when it does not: the "
        "file costs nothing to a plain ONNX Runtime user",
    )
    build.add_argument(
        "--opset",
        type=int,
        choices=list(OPSETS),
        default=None,
        help=f"the ONNX opset of the graphs (default {OPSETS[0]}): a later one for a runtime "
        "that wants it. Earlier ones cannot hold the Attention, RotaryEmbedding and "
        "RMSNormalization ops the graphs use",
    )
    build.add_argument(
        "--model-type",
        metavar="KEY",
        default=None,
        help="build the checkpoint as this registered key instead of the type its config.json "
        "names: a checkpoint that holds several models picks one by its class name. "
        "mobius list shows the keys",
    )
    build.add_argument(
        "--no-weights",
        action="store_true",
        help="build the graph only; parameters become graph inputs instead of stored weights",
    )
    build.add_argument(
        "--adapter",
        metavar="PEFT_DIR[,...]",
        type=_directories,
        action="append",
        default=None,
        help="PEFT LoRA adapter directories (adapter_config.json, adapter_model.safetensors), "
        "comma-separated or repeated: merged into the weights (several in turn), recorded in "
        "merged_adapter.json. Its module names must be the checkpoint's. Works with --quant "
        "(merged, then quantized)",
    )
    build.add_argument(
        "--adapter-inputs",
        action="store_true",
        help="with --adapter: do not merge; give each adapted projection LoRA graph inputs "
        "(<module>.lora_A.MatMul.weight, <module>.lora_B.MatMul.weight, zero rank by default so "
        "the base model runs unchanged) and write each adapter as <dir name>.onnx_adapter for "
        "onnxruntime-genai's Adapters API (multi-LoRA); adapters of different ranks share the "
        "graph. Needs onnxruntime; not with --quant",
    )
    build.add_argument(
        "--quant",
        choices=list(QUANT_METHODS),
        default=None,
        help="int4: store MatMul weights, the output head included, as 4-bit blocks for "
        "ONNX Runtime's MatMulNBits (see --quant-method, --quant-mix; the embeddings stay in "
        "--dtype unless --quant-embeddings); a GGUF file's quantized blocks are kept as they "
        "are. int8: the same with 8-bit blocks (weight-only; about twice int4's size, "
        "nearly float's accuracy). none: dequantize a GGUF file's blocks to --dtype. "
        "Default: keep what the checkpoint holds (a GGUF file's blocks, float weights as floats)",
    )
    build.add_argument(
        "--quant-method",
        choices=list(ROUNDING_METHODS),
        default="rtn",
        help="how --quant picks each block's scale and zero point. rtn (default): round to "
        "nearest from the block's extremes. hqq: a few half-quadratic refits per block that "
        "lower its rounding error (never above rtn's, block by block; no calibration data), "
        "for about twice the build time; it helps most with --quant-mix none",
    )
    build.add_argument(
        "--quant-mix",
        choices=list(QUANT_MIXES),
        default=None,
        help="with --quant int4: which weights stay at 8 bits. none (default): every weight at "
        "4 bits, the fastest decode. sensitive: those 4 bits hurt most, as llama.cpp's Q4_K_M "
        "gives them more bits: the output head, and the attention value and MLP down "
        "projections of the first and last eighth of the layers and every third layer between "
        "(on SmolLM2-135M: perplexity 42 instead of 50, fp32 39; quantized weights about 25%% "
        "larger, decoding about 20%% slower)",
    )
    build.add_argument(
        "--requantize",
        action="store_true",
        help="with --quant int4 on a GGUF file: round its quantized blocks again instead of "
        "keeping them (changes the model; a warning names the tensors)",
    )
    build.add_argument(
        "--no-quant-lm-head",
        action="store_true",
        help="with --quant: keep the output head (lm_head) in --dtype",
    )
    build.add_argument(
        "--quant-embeddings",
        action="store_true",
        help="with --quant: store the token embeddings as blocks too "
        "(GatherBlockQuantized; a tied lm_head shares them)",
    )
    build.add_argument(
        "--block-size",
        type=int,
        choices=[16, 32, 64, 128, 256],
        default=32,
        help="input channels per --quant block (default 32)",
    )
    zero_points = build.add_mutually_exclusive_group()
    zero_points.add_argument(
        "--asymmetric",
        dest="symmetric",
        action="store_const",
        const=False,
        default=None,
        help="--quant blocks with a zero point per block (the default for int4)",
    )
    zero_points.add_argument(
        "--symmetric",
        dest="symmetric",
        action="store_const",
        const=True,
        help="--quant blocks around a fixed zero point (the default for int8)",
    )
    build.add_argument(
        "--accuracy-level",
        type=int,
        choices=[0, 1, 2, 3, 4],
        default=4,
        help="MatMulNBits compute type (--quant, and a GGUF file's kept blocks): 4 = int8 "
        "activations, as llama.cpp computes, fastest on CPU (default); 0 = the activations' "
        "own type: a GGUF file's numbers exactly, several times slower",
    )
    build.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    build.add_argument(
        "--head",
        choices=["auto", *heads],
        default="auto",
        help="encoders and classifiers: the output beside the hidden states. 'masked-lm', "
        "'sequence-classification', 'token-classification' add 'logits'; "
        "'sentence-embedding' adds 'sentence_embedding' (see --pooling, --normalize); "
        "'question-answering' adds 'start_logits' and 'end_logits'; 'multiple-choice' takes "
        "[batch, choices, sequence] inputs and gives 'logits' [batch, choices]; "
        "'none' only hidden states; domain packages add their own (an image classifier's "
        "logits). 'auto' (default) follows the checkpoint: a sentence-transformers "
        "directory gives its sentence embedding, a *ForMaskedLM its logits, and so on",
    )
    build.add_argument(
        "--pooling",
        choices=list(POOLING_MODES),
        default=None,
        help="sentence-embedding: pool the real tokens by mean, the first (cls) token, max, or "
        "the last real token (lasttoken: decoder embedders, either padding side) (default: "
        "the sentence-transformers config's, else mean)",
    )
    build.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sentence-embedding: L2-normalise it (default: as the sentence-transformers "
        "config says, else no)",
    )
    build.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a non-empty OUTPUT_DIR (only once the new build is complete); never "
        "the model itself, a folder holding it or inside it, '.', '~' or '/'",
    )
    build.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read pickled PyTorch weights (pytorch_model.bin, .pt) when there are no "
        "safetensors. Unpickling can run code; mobius reads them with its own restricted "
        "unpickler (tensors and plain containers only), and warns",
    )
    build.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    check = build.add_argument_group("validation")
    check.add_argument(
        "--validate",
        action="store_true",
        help="after the build, run the source model (transformers, in float32: it needs torch "
        "and about 4 bytes per parameter of memory) and the package on a fixed sample input "
        "and report the max abs difference and whether greedy tokens agree; fail above "
        "--atol. Without torch: a smoke inference of the package",
    )
    check.add_argument(
        "--atol",
        type=float,
        default=None,
        metavar="X",
        help="--validate's tolerance on the max abs difference (default: 1e-3 for f32 builds, "
        "0.25 f16, 2 bf16; quantized builds are reported, not gated, unless given)",
    )
    _add_plugin_options(build, plugin_options, "build")
    build.set_defaults(run=_build)

    runner_help = "".join(f"\n\n{r.help}" for r in runners if r.help)
    runner_examples = "".join(f"  {e}\n" for r in runners for e in r.examples)
    generate = commands.add_parser(
        "generate",
        help="run a built package with ONNX Runtime: text generation, and what domain "
        "packages add (transcription, images)",
        description=(
            "Run the package in OUTPUT_DIR (written by 'mobius build') on PROMPT with ONNX\n"
            "Runtime and stream the text to stdout as it is generated. The prompt goes\n"
            "through the tokenizer's chat template when it has one. A causal LM continues\n"
            "the prompt; a seq2seq package (encoder/ and decoder/ graphs) encodes it once\n"
            "and decodes from the decoder start token, with the config's\n"
            "forced_bos_token_id (a target language) and forced_eos_token_id.\n\n"
            "Decoding is greedy (reproducible) unless --do-sample, --temperature, --top-k or\n"
            "--top-p is given; sampling parameters not given come from the package's\n"
            "generation_config.json (else temperature 1, top-k 50, top-p 1). Generation stops\n"
            "at an end-of-sequence id (generation_config.json, config.json) or N new tokens.\n\n"
            "At the end, one line on stderr gives the time to first token and the decode\n"
            "rate in tokens/s: the tokens after the first, over the time since the first.\n"
            "On Linux (glibc 2.35+, transparent huge pages in madvise mode) the command\n"
            "restarts itself once with GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which puts the\n"
            "weights on 2 MiB pages for faster decoding; MOBIUS_HUGE_PAGES=0 turns it off.\n"
            "Needs ONNX Runtime: pip install mobius-core[run]" + runner_help
        ),
        epilog="""examples:
  mobius generate out/ "The capital of France is" --no-chat-template --max-new-tokens 32
  mobius generate out/ "Write a haiku about rain." --do-sample --seed 0
  mobius generate out/ "Hi!" --system "You answer in French." --temperature 0.7 --top-p 0.9
  mobius generate seq2seq-out/ "translate English to German: The house is wonderful."
"""
        + runner_examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    generate.add_argument("output", metavar="OUTPUT_DIR", help="package written by mobius build")
    generate.add_argument(
        "prompt",
        metavar="PROMPT",
        help="the prompt text (or what a domain runner takes: an audio file)",
    )
    generate.add_argument(
        "--max-new-tokens",
        type=int,
        default=128,
        metavar="N",
        help="stop after N new tokens, if no end-of-sequence token came first (default 128)",
    )
    generate.add_argument(
        "--do-sample", action="store_true", help="sample the next token instead of greedy argmax"
    )
    generate.add_argument(
        "--temperature",
        type=float,
        default=None,
        metavar="T",
        help="sampling temperature; implies --do-sample; 0 means greedy",
    )
    generate.add_argument(
        "--top-k",
        type=int,
        default=None,
        metavar="K",
        help="sample among the K likeliest tokens (0: all); implies --do-sample",
    )
    generate.add_argument(
        "--top-p",
        type=float,
        default=None,
        metavar="P",
        help="sample within the smallest set of tokens whose probability reaches P; implies --do-sample",
    )
    generate.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="random seed: the same seed gives the same text",
    )
    generate.add_argument(
        "--output",
        dest="output_file",
        default=None,
        metavar="FILE",
        help="the file a runner that makes one writes (an image, a WAV: each runner's "
        "default name below); text goes to stdout",
    )
    generate.add_argument(
        "--no-chat-template",
        action="store_true",
        help="tokenize PROMPT as is (with the tokenizer's BOS), not as a chat user message",
    )
    generate.add_argument(
        "--system", default=None, metavar="TEXT", help="a system message (needs a chat template)"
    )
    generate.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="ONNX Runtime intra-op threads (default: its own)",
    )
    _add_plugin_options(generate, plugin_options, "generate")
    generate.set_defaults(run=_generate)

    embed = commands.add_parser(
        "embed",
        help="embed texts (or classify them) with a built feature-extraction package",
        description=(
            "Run the encoder package in OUTPUT_DIR on each TEXT with ONNX Runtime and its own\n"
            "tokenizer. A package built with a sentence-embedding head (a sentence-transformers\n"
            "source's default) gives its embedding, pooled and normalised as built; a package\n"
            "without one gives the mean of last_hidden_state over the real tokens. A decoder\n"
            "embedder's instruction prefix (what its model card puts before a query) is not\n"
            "added: put it in TEXT. A sequence classifier gives each text's label and score\n"
            "instead; a reranker (one logit) scores each TEXT against --query, as its\n"
            "(query, text) pair ('mobius rerank' ranks documents, as CrossEncoder does). A\n"
            "question-answering package answers --query from each TEXT (its best span).\n\n"
            "Output: one JSON line per text on stdout, or --output FILE (.npy or .json).\n"
            "Needs ONNX Runtime: pip install mobius-core[run]"
        ),
        epilog="""examples:
  mobius embed minilm-out/ "The capital of France is Paris." "Hi"
  mobius embed minilm-out/ "first text" "second text" --output vectors.npy
  mobius embed reranker-out/ "Paris is in France." "Bananas are yellow." --query "Where is Paris?"
""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    embed.add_argument("output", metavar="OUTPUT_DIR", help="package written by mobius build")
    embed.add_argument("texts", metavar="TEXT", nargs="+", help="the texts to embed")
    embed.add_argument(
        "--output",
        dest="save_to",
        default=None,
        metavar="FILE",
        help="write the embeddings to FILE (.npy: float32 [texts, hidden]; else JSON)",
    )
    embed.add_argument(
        "--query",
        default=None,
        metavar="TEXT",
        help="rerankers and pair classifiers: score each TEXT paired with this query; "
        "question answering: the question each TEXT answers",
    )
    embed.add_argument(
        "--threads", type=int, default=None, metavar="N", help="ONNX Runtime intra-op threads"
    )
    embed.set_defaults(run=_embed)

    classify = commands.add_parser(
        "classify",
        help="classify images (or audio) with a built classifier package",
        description=(
            "Run the classifier package in OUTPUT_DIR on each INPUT with ONNX Runtime and\n"
            "print its likeliest labels with their probabilities. A zero-shot package\n"
            "scores the INPUTs against the --labels you give.\n"
            "Needs ONNX Runtime: pip install mobius-core[run]"
            + "".join(f"\n\n{r.help}" for r in classifiers if r.help)
        ),
        epilog="examples:\n" + "".join(f"  {e}\n" for r in classifiers for e in r.examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    classify.add_argument("output", metavar="OUTPUT_DIR", help="package written by mobius build")
    classify.add_argument("inputs", metavar="INPUT", nargs="+", help="the files to classify")
    classify.add_argument(
        "--labels",
        default=None,
        metavar="A,B,...",
        help="zero-shot packages: the candidate labels, comma-separated",
    )
    classify.add_argument(
        "--top",
        type=int,
        default=5,
        metavar="K",
        help="print the K likeliest labels of each input (default 5)",
    )
    classify.add_argument(
        "--threads", type=int, default=None, metavar="N", help="ONNX Runtime intra-op threads"
    )
    _add_plugin_options(classify, plugin_options, "classify")
    classify.set_defaults(run=_classify)

    for info in domain_commands:
        _add_domain_command(commands, common, info, plugin_options, domain_runners[info.name])

    list_ = commands.add_parser(
        "list",
        help="list the registered model types, grouped by package",
        description="List every registered model type and its task, grouped by the package that registers it.",
        parents=[common],
    )
    list_.set_defaults(run=_list)

    info = commands.add_parser(
        "info",
        help="show what a model is and which build options apply, without its weights; or "
        "how a built package was made",
        description=(
            "Describe ID_OR_DIR without downloading or reading its weights: model type,\n"
            "the package that registers it, task, whether the type is verified by parity,\n"
            "the checkpoint's dtype, parameter count, size per dtype (f32, f16/bf16, int4\n"
            "in blocks of 32) and the build options that apply (--ep cpu fused ops,\n"
            "--runtime ort-genai, --quant int4). The answers come from the graphs built\n"
            "without weights, as `mobius build` builds them; a hub id fetches config.json\n"
            "and generation_config.json only.\n\n"
            "Given a package that `mobius build` wrote (a directory with mobius.json), show\n"
            "its build record instead: the mobius and domain package versions, the source\n"
            "and the SHA-256 of its weight files, every build option, the task, each\n"
            "graph's inputs and outputs and file sizes, and whether the type is verified."
        ),
        epilog="examples:\n  mobius info HuggingFaceTB/SmolLM2-135M-Instruct\n"
        "  mobius info ./my-checkpoint --json\n  mobius info model.Q4_1.gguf\n"
        "  mobius info out/            (a package written by mobius build)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    info.add_argument(
        "model",
        metavar="ID_OR_DIR",
        help="HuggingFace model id (with HF_HUB_OFFLINE=1, read from the local cache), a "
        "local directory with config.json, a .gguf file, or a package directory written by "
        "mobius build",
    )
    info.add_argument("--json", action="store_true", help="print one JSON object instead")
    info.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    info.set_defaults(run=_info)
    return parser


def hide_torch_from_transformers() -> None:
    """Make an installed but unimported torch look absent to this process.

    mobius never runs torch, but transformers' config classes import it whenever it
    is installed: about 9 s and 0.55 GB of every build on a 2-core machine (a build with
    ``--validate`` keeps it: it runs the source model). A
    ``None`` in ``sys.modules`` makes ``import torch`` fail and ``find_spec``
    report it missing, so transformers takes its torch-free path, as in an install
    without torch. Only the console command does this; ``main`` called from Python
    leaves the caller's torch alone. transformers' advice that models need PyTorch
    is silenced: mobius needs only its configs.
    """
    sys.modules.setdefault("torch", None)
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def run() -> None:
    """The ``mobius`` console command and ``python -m mobius``: exits with :func:`main`'s code.

    Ctrl-C exits 130 with one line wherever it lands in here: in :func:`main` (which says
    so) or just around it (a second Ctrl-C while main prints its line). ``python -m mobius``
    (:mod:`mobius.__main__`) also covers the loading of this module and Python's exit.
    """
    try:
        reexec_with_huge_pages(sys.argv[1:])  # before any weight is loaded
        if "--validate" not in sys.argv[1:]:  # validating runs the source model, in torch
            hide_torch_from_transformers()
        code = main()
    except KeyboardInterrupt:
        code = _interrupted()
    raise SystemExit(code)


# Whether this run of main has printed its "interrupted" line: a second Ctrl-C says nothing.
_said_interrupted = False


def _interrupted() -> int:
    """Say (once) that Ctrl-C stopped the command; returns its exit code, 130."""
    global _said_interrupted
    if not _said_interrupted:
        _said_interrupted = True
        print("mobius: interrupted", file=sys.stderr, flush=True)
    return 130


def exit_on_interrupt() -> None:
    """From now on, Ctrl-C ends the process at once with exit code 130 (and the one line).

    For the process's last moments, once :func:`run` is done: Python's exit flushes files
    and waits for threads, and its own handler would print a traceback there. A program
    that started mobius with SIGINT ignored keeps it ignored.
    """
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_interrupted)


def _exit_interrupted(signum, frame) -> None:
    """SIGINT while the process exits: exit 130 at once, without the rest of the exit."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        _interrupted()
    os._exit(130)


class _NoteFormatter(logging.Formatter):
    """``mobius: note: ...`` for warnings, ``mobius: ...`` for a build's progress lines."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = "mobius: note: " if record.levelno >= logging.WARNING else "mobius: "
        return prefix + record.getMessage()


def _log_notes(progress: bool = False) -> logging.Handler:
    """Print mobius's log warnings (a plugin that failed, leftovers removed) as ``mobius: note:``;
    with ``progress`` (a build without ``--quiet``) its info lines too (what each GGUF tensor
    type became, the files written when stderr is not a terminal)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_NoteFormatter())
    handler.setLevel(logging.INFO if progress else logging.WARNING)
    logger = logging.getLogger("mobius")
    logger.addHandler(handler)
    handler.previous_level = logger.level  # restored when the command ends
    if progress and logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; errors print one line to stderr (``--verbose``: and the traceback).

    Exit codes: 0 success, 1 an error in the input or environment
    (:class:`mobius.errors.MobiusError`), 2 a usage error, 3 an internal error
    (a bug in mobius), 130 interrupted.
    """
    global _said_interrupted
    _said_interrupted = False
    argv = sys.argv[1:] if argv is None else list(argv)
    # Only build, generate, classify and the domains' own commands (and the command list of
    # --help) need the domain packages: the others start without loading them.
    command = next((a for a in argv if not a.startswith("-")), None)
    plugins = command not in ("embed", "list", "info")
    if command is None:  # ``mobius --version`` needs none; ``mobius --help`` lists their commands
        plugins = "-h" in argv or "--help" in argv
    try:
        args = make_parser(plugins=plugins).parse_args(argv)
    except KeyboardInterrupt:  # loading the domain packages for the parser takes a while
        return _interrupted()
    verbose = getattr(args, "verbose", False)
    handler = _log_notes(progress=args.command == "build" and not getattr(args, "quiet", False))
    try:
        return args.run(args)
    except MobiusError as exc:
        if verbose:
            traceback.print_exc()
        print(f"mobius: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:  # output piped into a reader that stopped (``mobius list | head``)
        sys.stderr.close()
        return 0
    except MemoryError as exc:  # sizes from the input (or a model) beyond this machine
        if verbose:
            traceback.print_exc()
        reason = " ".join(str(exc).split()) or "an allocation failed"
        print(f"mobius: error: out of memory: {reason}", file=sys.stderr)
        return 1
    except Exception as exc:  # not the user's doing: say so in one line, trace on request
        if verbose:
            traceback.print_exc()
        hint = "" if verbose else "; --verbose prints the traceback"
        print(
            f"mobius: internal error (a bug in mobius, please report it): "
            f"{type(exc).__name__}: {' '.join(str(exc).split())}{hint}",
            file=sys.stderr,
        )
        return 3
    finally:
        logging.getLogger("mobius").removeHandler(handler)
        logging.getLogger("mobius").setLevel(handler.previous_level)

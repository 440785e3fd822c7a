"""The ``mobius`` command line."""

from __future__ import annotations

import argparse
import sys

from mobius import __version__
from mobius.errors import MobiusError

EPILOG = """examples:
  mobius build --model HuggingFaceTB/SmolLM2-135M-Instruct out/
  mobius build --model ./my-checkpoint out/ --dtype f16
  mobius build --model ./my-checkpoint out/ --ep cpu --quant int4
  mobius list
"""


def _build(args: argparse.Namespace) -> int:
    from mobius._build import build

    package = build(
        args.model,
        dtype=args.dtype,
        load_weights=not args.no_weights,
        revision=args.revision,
        quant=args.quant,
        block_size=args.block_size,
        symmetric=not args.asymmetric,
        accuracy_level=args.accuracy_level,
        quant_lm_head=not args.no_quant_lm_head,
        quant_embeddings=args.quant_embeddings,
        ep=args.ep,
    )
    if args.no_weights:
        from mobius.weights import parameters

        for model in package.models.values():
            for value in parameters(model).values():
                # Without weights, parameters become graph inputs so the graph stays valid ONNX.
                model.graph.initializers.pop(value.name)
                model.graph.inputs.append(value)
    genai = None
    if args.runtime == "ort-genai":
        from mobius._genai import genai_config, write_genai_config

        genai = genai_config(package, ep=args.ep)  # an unsupported model fails before writing
    out = package.save(args.output, progress=not args.quiet)
    if genai is not None:
        write_genai_config(genai, out)
    print(f"wrote {out}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from mobius._registry import registry

    grouped = registry.by_package()
    for package in sorted(grouped):
        entries = grouped[package]
        print(f"{package} ({len(entries)})")
        for entry in entries:
            print(f"  {entry.key:<24} {entry.task}")
    if not grouped:
        print("no architectures registered: install a domain package such as mobius-text")
    for dist, error in registry.plugin_errors.items():
        print(f"plugin {dist} failed to load: {error}", file=sys.stderr)
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mobius",
        description="Build ONNX models for generative-AI architectures from HuggingFace checkpoints.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mobius {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    build = commands.add_parser(
        "build",
        help="build an ONNX model from a HuggingFace model id or a local directory",
        description=(
            "Build MODEL into OUTPUT_DIR: model.onnx, model.onnx.data (external weights), "
            "and the config, generation config and tokenizer files. The output appears "
            "only once complete; an existing OUTPUT_DIR is replaced."
        ),
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
        choices=["f32", "f16", "bf16"],
        default=None,
        help="floating-point type of weights and compute (default: the checkpoint's own)",
    )
    build.add_argument(
        "--ep",
        choices=["default", "cpu", "cuda"],
        default="default",
        help="runtime target: 'default' is portable standard ONNX; 'cpu' and 'cuda' use ONNX "
        "Runtime's fused kernels (GroupQueryAttention with rotary inside, "
        "SkipSimplifiedLayerNormalization), faster but ONNX Runtime only (default: default)",
    )
    build.add_argument(
        "--runtime",
        choices=["onnx", "ort-genai"],
        default="onnx",
        help="what runs the package: 'onnx' writes the graph for any ONNX runtime; "
        "'ort-genai' also writes genai_config.json so that onnxruntime-genai's generator "
        "loads it as is (causal LMs with a key/value cache on every layer) (default: onnx)",
    )
    build.add_argument(
        "--no-weights",
        action="store_true",
        help="build the graph only; parameters become graph inputs instead of stored weights",
    )
    build.add_argument(
        "--quant",
        choices=["int4"],
        default=None,
        help="store MatMul weights, the output head included, as 4-bit blocks for ONNX "
        "Runtime's MatMulNBits (round-to-nearest; the embeddings stay in --dtype unless "
        "--quant-embeddings)",
    )
    build.add_argument(
        "--no-quant-lm-head",
        action="store_true",
        help="with --quant: keep the output head (lm_head) in --dtype",
    )
    build.add_argument(
        "--quant-embeddings",
        action="store_true",
        help="with --quant: store the token embeddings as 4-bit blocks too "
        "(GatherBlockQuantized; a tied lm_head shares them)",
    )
    build.add_argument(
        "--block-size",
        type=int,
        choices=[16, 32, 64, 128, 256],
        default=32,
        help="input channels per int4 block (default 32)",
    )
    build.add_argument(
        "--asymmetric",
        action="store_true",
        help="int4 with a zero point per block (default: symmetric)",
    )
    build.add_argument(
        "--accuracy-level",
        type=int,
        choices=[0, 1, 2, 3, 4],
        default=4,
        help="MatMulNBits compute type: 4 = int8 activations, fastest on CPU (default); "
        "0 = the activations' own type",
    )
    build.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    build.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    build.set_defaults(run=_build)

    list_ = commands.add_parser(
        "list",
        help="list the registered model types, grouped by package",
        description="List every registered model type and its task, grouped by the package that registers it.",
    )
    list_.set_defaults(run=_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors print one line to stderr and return a non-zero code."""
    args = make_parser().parse_args(argv)
    try:
        return args.run(args)
    except MobiusError as exc:
        print(f"mobius: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mobius: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped (``mobius list | head``)
        sys.stderr.close()
        return 0

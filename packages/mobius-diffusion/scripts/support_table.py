"""Write SUPPORT.md: the diffusers component classes mobius-diffusion targets, and their status.

The status comes from the registry (what mobius-diffusion registers) and from a
fresh run of the parity tests: a class is *verified* only when it is registered
and every parity case of it passes. The verified classes also go into
``src/mobius_diffusion/verified.json``, which the registry reads.

    uv run python packages/mobius-diffusion/scripts/support_table.py [--no-run RESULTS.xml]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mobius.testing._support import add_test, parity_results, support_markdown, write_verified

PACKAGE_DIR = Path(__file__).resolve().parents[1]
TESTS = PACKAGE_DIR / "tests"
OUTPUT = PACKAGE_DIR / "SUPPORT.md"
VERIFIED = PACKAGE_DIR / "src" / "mobius_diffusion" / "verified.json"

#: (task, heading, what the parity covers, {class: (test file, test function)})
KITS = (
    (
        "vae",
        "Autoencoders",
        "fp32, encoder moments and decoded sample, a batch of two, max abs difference "
        "≤ 1e-4 × max(1, output scale), --ep default and cpu",
        {
            "AutoencoderKL": ("test_autoencoder_kl_parity.py", "test_autoencoder_kl_parity"),
            "AutoencoderKLCogVideoX": ("test_cogvideox_vae_parity.py", "test_cogvideox_vae_parity"),
        },
    ),
    (
        "denoising",
        "Denoisers",
        "fp32, the denoiser's output for a batch of two latents, timesteps and conditionings, "
        "max abs difference ≤ 1e-4 × max(1, output scale), --ep default and cpu",
        {
            "UNet2DConditionModel": (
                "test_unet_2d_condition_parity.py",
                "test_unet_2d_condition_parity",
            ),
            "DiTTransformer2DModel": ("test_dit_parity.py", "test_dit_parity"),
            "PixArtTransformer2DModel": ("test_pixart_parity.py", "test_pixart_parity"),
            "SD3Transformer2DModel": ("test_sd3_parity.py", "test_sd3_parity"),
            "FluxTransformer2DModel": ("test_flux_parity.py", "test_flux_parity"),
            "CogVideoXTransformer3DModel": ("test_cogvideox_parity.py", "test_cogvideox_parity"),
        },
    ),
    (
        "controlnet",
        "ControlNets",
        "fp32, every down-block and mid-block residual, a batch of two, max abs difference "
        "≤ 1e-4 × max(1, output scale), --ep default and cpu",
        {"ControlNetModel": ("test_controlnet_parity.py", "test_controlnet_parity")},
    ),
    (
        "adapter",
        "Adapters",
        "fp32, every feature (T2I) or the image prompt embeddings (IP), a batch of two, max abs "
        "difference ≤ 1e-4 × max(1, output scale), --ep default and cpu",
        {
            "T2IAdapter": ("test_t2i_adapter_parity.py", "test_t2i_adapter_parity"),
            "IPAdapterImageProjection": ("test_ip_adapter_parity.py", "test_ip_adapter_parity"),
        },
    ),
)


#: Keys that are not diffusers classes themselves: the classes they stand for.
REFERENCE_CLASSES = {
    # a single-file IP-Adapter checkpoint; diffusers converts it into one of these
    "IPAdapterImageProjection": "ImageProjection or IPAdapterFullImageProjection",
}


def statuses(junit_xml: Path | None) -> dict[str, list[tuple[str, str, str]]]:
    """Task -> rows ``(key, diffusers class, status)``."""
    import mobius_diffusion

    registered = {k: cls.task for k, cls in mobius_diffusion.model_types().items()}
    targets = {cls for _task, _heading, _covers, table in KITS for cls in table}
    unlisted = sorted(set(registered) - targets)
    if unlisted:
        raise SystemExit(f"registered but not in this script's KITS: {unlisted}")
    files = sorted(
        {TESTS / f for *_, table in KITS for f, _ in table.values() if (TESTS / f).is_file()}
    )
    passed = parity_results(files, junit_xml)
    tables = {}
    for task, _heading, _covers, table in KITS:
        rows = []
        for cls, (_file, test) in sorted(table.items()):
            cases = passed.get(test, {})
            if registered.get(cls) == task:
                ok = bool(cases) and all(cases.values())
                status = f"verified ({len(cases)} cases)" if ok else "registered, parity FAILING"
            else:
                status = "not yet"
            rows.append((cls, REFERENCE_CLASSES.get(cls, cls), status))
        tables[task] = rows
    return tables


def parity_tests() -> dict[str, str]:
    """Registry key -> the parity test of its class (``tests/FILE::FUNCTION``); nothing runs."""
    tests: dict[str, str] = {}
    for *_, table in KITS:
        for cls, (file, test) in table.items():
            add_test(tests, cls, file, test)
    return tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-run",
        type=Path,
        metavar="RESULTS.xml",
        help="read parity results from this JUnit XML instead of running the tests",
    )
    tables = statuses(parser.parse_args().no_run)
    import diffusers

    sections = [(heading, covers, tables[task]) for task, heading, covers, _ in KITS]
    text, verified = support_markdown(
        "mobius-diffusion", diffusers.__version__, sections, "diffusers", "class"
    )
    OUTPUT.write_text(text)
    write_verified(VERIFIED, verified, diffusers.__version__, "diffusers", tests=parity_tests())
    print(f"wrote {OUTPUT} and {VERIFIED.name}: {len(verified)} verified")
    if any("FAILING" in row[2] for rows in tables.values() for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()

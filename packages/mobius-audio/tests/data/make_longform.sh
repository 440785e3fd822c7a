#!/usr/bin/env bash
# Makes longform.ogg, the >= 60 s recording of the Whisper long-form tests, from
# longform.txt: espeak-ng speaks it (22.05 kHz WAV), soxr resamples it to 16 kHz mono
# and soundfile stores it as Ogg Vorbis (about 340 kB; 16-bit FLAC would be 1 MB).
# Needs espeak-ng and the workspace's Python with mobius-audio[run]:
#   bash packages/mobius-audio/tests/data/make_longform.sh
set -euo pipefail
cd "$(dirname "$0")"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
espeak-ng -w "$scratch/speech.wav" -f longform.txt
uv run --frozen python - "$scratch/speech.wav" longform.ogg <<'PY'
import sys

import soundfile
import soxr

audio, rate = soundfile.read(sys.argv[1], dtype="float32")
audio = soxr.resample(audio, rate, 16000, quality="HQ")
soundfile.write(sys.argv[2], audio, 16000, format="OGG", subtype="VORBIS")
print(f"{sys.argv[2]}: {audio.size / 16000:.1f} s")
PY

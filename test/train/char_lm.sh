#!/bin/sh
# examples/char_lm end to end on a tiny model (two blocks of width 32, context
# 16, 80 steps): it trains below the unigram baseline, generates text, and
# trains the same under mirrored and the pipeline on two devices as on one
# (the validation losses equal to round-off; same global batch and windows:
# within 1e-6 after the first 40 steps; later, at this learning rate,
# round-off grows as training goes on, so within 2e-4, under the 3.7e-4 by
# which PyTorch's float32 and float64 runs of this very model and batches
# part by step 80: torch_char_lm.py --dump, docs/examples.md). Its saved
# model fine-tuned with --lora 4 (--init): a few trainable parameters, and
# validation still below the unigram baseline. --half trains as --activations
# float16, and --half weights is refused.
# Text: the Python standard library of the interpreter meson found.
# Usage: char_lm.sh SOURCE_ROOT CHAR_LM
set -eu
# Each run chooses its PoCL devices; KILN_DEVICES would count another list.
unset KILN_DEVICES
exe=$2
text=$("${KILN_PYTHON:-python3}" -c 'import os; print(os.path.dirname(os.__file__))')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tiny="--blocks 2 --width 32 --heads 2 --context 16 --batch 16 --steps 40 --epochs 2 --lr 1e-2
      --val-windows 64 --text $text"

run() {  # name devices strategy [options]
    name=$1 devices=$2 strategy=$3
    shift 3
    if ! POCL_DEVICES="$devices" KILN_STRATEGY=$strategy $exe $tiny "$@" >"$tmp/$name" 2>&1; then
        cat "$tmp/$name"
        echo "char_lm.sh: $name failed"
        exit 1
    fi
}
# The validation losses of every epoch, in nats, one line.
val_losses() { sed -n 's/.*validation .* (loss \([0-9.]*\)).*/\1/p' "$tmp/$1" | paste -sd' '; }

run one pthread one_device --generate 40 --save "$tmp/base.kiln"
cat "$tmp/one"
baseline=$(sed -n 's/^unigram baseline: \([0-9.]*\) bits.*/\1/p' "$tmp/one")
last=$(sed -n 's/.*validation \([0-9.]*\) bits\/char.*/\1/p' "$tmp/one" | tail -n 1)
grep -q '^sample (temperature' "$tmp/one" || { echo "char_lm.sh: no sample"; exit 1; }
awk -v b="$baseline" -v l="$last" 'BEGIN { exit !(l != "" && l < b) }' ||
    { echo "char_lm.sh: validation $last bits/char is not below the unigram $baseline"; exit 1; }

run lora pthread one_device --generate 0 --epochs 1 --init "$tmp/base.kiln" --lora 4
sed -n '/^model:/p; /^LoRA/p; /^epoch/p' "$tmp/lora"
awk '/^model:/ { exit !($(NF-3) + 0 > 0 && $(NF-1) + 0 > 0 && $(NF-1) * 10 < $(NF-3)) }' \
    "$tmp/lora" || { echo "char_lm.sh: --lora trains more than a tenth of the weights"; exit 1; }
tuned=$(sed -n 's/.*validation \([0-9.]*\) bits\/char.*/\1/p' "$tmp/lora" | tail -n 1)
awk -v b="$baseline" -v l="$tuned" 'BEGIN { exit !(l != "" && l < b) }' ||
    { echo "char_lm.sh: LoRA's validation $tuned bits/char is not below $baseline"; exit 1; }

# --half is --activations float16 (the same loss and bytes); --half weights is
# refused (exit 2), as is --half beside --activations.
small="--steps 2 --epochs 1 --val-windows 16 --generate 0 --text $text/unittest"
run half pthread one_device $small --half
run float16 pthread one_device $small --activations float16
same() { sed -n '/^epoch/s/, [0-9.]* s, .*//p; /^device memory bytes/p' "$tmp/$1"; }
[ -n "$(same half)" ] && [ "$(same half)" = "$(same float16)" ] ||
    { same half; same float16; echo "char_lm.sh: --half is not --activations float16"; exit 1; }
act() { sed -n 's/^device memory bytes: .*, activations \([0-9]*\),.*/\1/p' "$tmp/$1"; }
awk -v h="$(act half)" -v f="$(act one)" 'BEGIN { exit !(h != "" && f != "" && h < f) }' ||
    { echo "char_lm.sh: --half's activations $(act half) bytes, float32's $(act one)"; exit 1; }
refused() {  # needle options...
    needle=$1
    shift
    if $exe "$@" >"$tmp/refused" 2>&1; then rc=0; else rc=$?; fi
    [ "$rc" = 2 ] && grep -qF -- "$needle" "$tmp/refused" ||
        { cat "$tmp/refused"; echo "char_lm.sh: $* exited $rc, not 2 with '$needle'"; exit 1; }
}
refused "--half weights is not offered: weights stay float32, since a half copy beside the \
optimizer's float32 master adds memory and saves none" --half weights
refused "--half is --activations float16: give one of them" --half --activations float32
refused "--half is --activations float16: give one of them" --activations float16 --half
echo "--half: as --activations float16; --half weights refused"

# Two devices where PoCL gives them; else one device's check is all.
run two_one "basic basic" one_device --generate 0
if ! grep -q '^strategy: one_device' "$tmp/two_one"; then
    cat "$tmp/two_one"; exit 1
fi
devices=$(POCL_DEVICES="basic basic" KILN_STRATEGY=mirrored $exe $tiny --steps 1 --epochs 1 \
          --val-windows 0 --generate 0 | sed -n 's/^strategy: mirrored, \([0-9]*\) .*/\1/p')
if [ "${devices:-1}" -lt 2 ]; then
    echo "SKIP of the two-device part: PoCL gave one basic device"
    exit 0
fi
run mirrored "basic basic" mirrored --generate 0
run pipeline "basic basic" pipeline --generate 0
grep -q '^stage 1 on' "$tmp/pipeline" ||
    { cat "$tmp/pipeline"; echo "char_lm.sh: no stage plan"; exit 1; }
for s in mirrored pipeline; do
    echo "$s: $(val_losses $s)   one device: $(val_losses two_one)"
    awk -v a="$(val_losses $s)" -v b="$(val_losses two_one)" 'BEGIN {
        n = split(a, x, " "); m = split(b, y, " ")
        if (n != m || n == 0) exit 1
        for (i = 1; i <= n; i++) {
            d = x[i] - y[i]; if (d < 0) d = -d
            if (d > (i == 1 ? 1e-6 : 2e-4)) exit 1
        }
    }' || { echo "char_lm.sh: $s's validation losses differ from one device's"; exit 1; }
done
echo "char_lm.sh: passed"

#!/bin/bash
# ps_config_check, the binary: flags apply before the config is judged, so a
# file that lacks what a flag supplies (checkpoint.dir for periodic
# evaluation) is written out complete; the file's own error, with its line,
# is what is reported when the flags do not fix it; a flag that breaks a
# valid file is named.
set -u
CHECK=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-shardps}/common/ps_config_check
[ -x "$CHECK" ] || CHECK=bazel-bin/common/ps_config_check
dir=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

cat > "$dir/eval.pbtxt" <<'CFG'
name: "t"
tables { id: 1 name: "emb" kind: SPARSE dim: 4 optimizer { sgd { learning_rate: 0.1 } } }
data { format: CRITEO synthetic_dir: "/tmp/x" }
training { batch_size: 8 eval_every_steps: 10 }
cluster { num_servers: 1 num_workers: 1 num_partitions: 16 mode: BSP }
CFG

# Alone, the file is refused, naming the field and its line.
out=$("$CHECK" "$dir/eval.pbtxt" 2>&1) && fail "accepted eval_every_steps without checkpoint.dir: $out"
echo "$out" | grep -q "eval.pbtxt:4:.*eval_every_steps" || fail "error does not name line 4 and the field: $out"

# With --checkpoint_dir it is written complete and the output validates alone.
"$CHECK" "$dir/eval.pbtxt" --write="$dir/out.pbtxt" --checkpoint_dir="$dir/ckpt" \
  || fail "refused with --checkpoint_dir"
grep -q "dir: \"$dir/ckpt\"" "$dir/out.pbtxt" || fail "checkpoint.dir not written: $(cat "$dir/out.pbtxt")"
"$CHECK" "$dir/out.pbtxt" > /dev/null || fail "the written config does not validate alone"

# --write without the fixing flag: the file's own error, with its line.
out=$("$CHECK" "$dir/eval.pbtxt" --write="$dir/out2.pbtxt" --epochs=2 2>&1) && fail "accepted: $out"
echo "$out" | grep -q "eval.pbtxt:4:.*eval_every_steps" || fail "not the file's error: $out"
[ ! -e "$dir/out2.pbtxt" ] || fail "wrote a config it refused"

# A valid file broken by a flag: the flag's problem is named.
cat > "$dir/ok.pbtxt" <<'CFG'
name: "t"
tables { id: 1 name: "emb" kind: SPARSE dim: 4 optimizer { sgd { learning_rate: 0.1 } } }
data { format: CRITEO synthetic_dir: "/tmp/x" }
training { batch_size: 8 }
cluster { num_servers: 1 num_workers: 1 num_partitions: 16 mode: BSP }
CFG
out=$("$CHECK" "$dir/ok.pbtxt" --write="$dir/out3.pbtxt" --mode=XSP 2>&1) && fail "accepted --mode=XSP"
echo "$out" | grep -q -- "--mode must be" || fail "bad flag not named: $out"

# Not text proto at all: refused with a line.
echo "tables { id: " > "$dir/bad.pbtxt"
out=$("$CHECK" "$dir/bad.pbtxt" --write="$dir/out4.pbtxt" --checkpoint_dir=/tmp/c 2>&1) && fail "accepted garbage"
echo "$out" | grep -q "bad.pbtxt:" || fail "garbage error has no file: $out"

# A flag's cadence replaces the config's other one (not both: refused).
"$CHECK" "$dir/eval.pbtxt" --write="$dir/out5.pbtxt" --checkpoint_dir="$dir/ckpt" \
  --eval_every_epochs=0.5 || fail "refused --eval_every_epochs over eval_every_steps"
grep -q "eval_every_epochs: 0.5" "$dir/out5.pbtxt" || fail "epochs not written: $(cat "$dir/out5.pbtxt")"
grep -q "eval_every_steps" "$dir/out5.pbtxt" && fail "eval_every_steps kept beside epochs"
"$CHECK" "$dir/out5.pbtxt" --write="$dir/out6.pbtxt" --eval_every_steps=7 \
  || fail "refused --eval_every_steps over eval_every_epochs"
grep -q "eval_every_steps: 7" "$dir/out6.pbtxt" || fail "steps not written"
grep -q "eval_every_epochs" "$dir/out6.pbtxt" && fail "eval_every_epochs kept beside steps"

# --torchscript_file makes the model the module (the launcher's --model);
# without a dense table to hold its parameters it is refused, naming it.
out=$("$CHECK" "$dir/ok.pbtxt" --write="$dir/out7.pbtxt" --torchscript_file=/m/tower.pt 2>&1) \
  && fail "accepted a TORCHSCRIPT model without model.dense_table"
echo "$out" | grep -q "model.kind: TORCHSCRIPT needs model.dense_table" || fail "not named: $out"
sed 's/^cluster/tables { id: 2 name: "mlp" kind: DENSE optimizer { adagrad { learning_rate: 0.1 } } }\nmodel { dense_table: "mlp" }\ncluster/' \
  "$dir/ok.pbtxt" > "$dir/dense.pbtxt"
"$CHECK" "$dir/dense.pbtxt" --write="$dir/out8.pbtxt" --torchscript_file=/m/tower.pt \
  || fail "refused --torchscript_file"
grep -q "kind: TORCHSCRIPT" "$dir/out8.pbtxt" || fail "kind not written: $(cat "$dir/out8.pbtxt")"
grep -q 'torchscript_file: "/m/tower.pt"' "$dir/out8.pbtxt" || fail "file not written"
echo PASS

# Session 26, call 2: the decode weights streamed into registers (bench/tools/register_stream.cu)
# beside the TMA box stream (weight_order.cu) on the same machine.
mkdir -p $OUT/r
timeout 200 build/s26/register_stream > $OUT/r/register_stream.txt 2>&1; echo "rc=$?"; cat $OUT/r/register_stream.txt
timeout 200 build/s26/weight_order > $OUT/r/weight_order.txt 2>&1; echo "rc=$?"; grep -E "^[a-z]|order 0|row chunks" $OUT/r/weight_order.txt

# Session 26, calls 4 and 5 (two machines): weight_order with the token-box rows (call 4: grouped
# 4-D boxes with a 16-row token box per stage; call 5: token boxes without L2 fills and two
# k-blocks of tokens every other stage), built from bench/tools/weight_order.cu at each commit.
mkdir -p $OUT/r; timeout 200 build/s26/weight_order > $OUT/r/weight_order.txt 2>&1; echo rc=$?
grep -E "^[a-z]|order 0|token box|grouped" $OUT/r/weight_order.txt

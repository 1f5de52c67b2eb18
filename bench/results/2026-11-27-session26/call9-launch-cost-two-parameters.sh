# Session 26, call 9: launch_cost's two A/Bs only (LAUNCH_COST_AB_ONLY=1), twice: the parameter
# block (4896 / 2352 bytes, one parameter) and one parameter against the library's two
# (640-byte map templates + the struct) at both sizes.
mkdir -p $OUT/r; for i in 1 2; do LAUNCH_COST_AB_ONLY=1 timeout 250 build/s26/launch_cost > $OUT/r/ab-$i.txt 2>&1; echo rc=$?; grep -E "A/B|one parameter" $OUT/r/ab-$i.txt; done

#!/bin/bash
# Nsight Compute profile of each GPU kernel at the kernel suite's configuration (issue 7).
#
#   bash benchmarks/ncu.sh OUTDIR [ROW...]      # rows: spiir coherent skyloop pulse (default: all)
#
# Runs `python -m benchmarks --backend cupy --only ROW --repeat 2` under ncu, profiling one launch
# of the row's kernel after the warm-up (clocks left alone: --clock-control none; for the pulse row
# the fused kernel's first group of the second series, the bulk of a series), and writes
# OUTDIR/ncu_ROW.csv (ncu's details page as CSV). `python benchmarks/ncu_summary.py OUTDIR/ncu_*.csv`
# prints the figures RESULTS.md quotes.
set -u
out=${1:?usage: bash benchmarks/ncu.sh OUTDIR [ROW...]}; shift
rows=${*:-spiir coherent skyloop pulse}
mkdir -p "$out"
declare -A kernel=([spiir]='regex:spiir_pass' [coherent]='regex:coherent_max' [skyloop]='regex:skyloop'
                   [pulse]='regex:boxcar_group')
declare -A skip=([spiir]=1 [coherent]=1 [skyloop]=1 [pulse]=3)  # pulse: three groups per series
for row in $rows; do
  ncu --clock-control none -k "${kernel[$row]}" --launch-skip "${skip[$row]}" --launch-count 1 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section InstructionStats \
      --metrics smsp__inst_executed.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__issue_active.avg.pct_of_peak_sustained_active \
      --csv --page details --log-file "$out/ncu_$row.csv" \
      python -m benchmarks --backend cupy --only "$row" --repeat 2 > "$out/ncu_$row.log" 2>&1
  echo "$row: exit $?, $(wc -l < "$out/ncu_$row.csv") lines"
done

# The floors of the code (DESIGN.md §5): which folder's headers each folder may include.
# Arrows point down only; folders on one floor (dist | optim | report, model | memory,
# io | kernels) do not use each other. The build (CMakeLists.txt: one library per folder) and
# the layering checks (tests/layering/) read this one table; a folder missing from it is an
# error there.
#
#   cli       the command line: one file per command group, main.cpp dispatches
#   runtime   the training loop, its set-up, guard and checkpoint state, the sampler
#   dist      process groups, gradient reduction, launchers' variables, launch, run identity
#   optim     the block optimizer (BCD, staged state), full-model AdamW, the BCD scheduler, LR
#   report    the banner, metrics.jsonl from a StepReport, TensorBoard events, plots, summary.json
#   model     Llama family, HF formats, weights files      memory   tiers, slab pool, planner, stager
#   data      tokenizer, documents, chat templates, prepare, datasets, loader, the Batch
#   io        io_uring engine, extent store, state files, checkpoints      kernels   AdamW, copy streams
#   base      errors, config structs and loading, byte sizes, progress
# (model sees data for the Batch a step trains on; memory knows bytes and units, never data.)
set(BCD_FLOORS base kernels io data model memory dist optim report runtime cli)
set(BCD_FLOOR_base_USES "")
set(BCD_FLOOR_kernels_USES base)
set(BCD_FLOOR_io_USES base)
set(BCD_FLOOR_data_USES io base)
set(BCD_FLOOR_model_USES data io kernels base)
set(BCD_FLOOR_memory_USES io kernels base)
set(BCD_FLOOR_dist_USES memory model data io kernels base)
set(BCD_FLOOR_optim_USES memory model data io kernels base)
set(BCD_FLOOR_report_USES memory io kernels base)
set(BCD_FLOOR_runtime_USES dist optim report memory model data io kernels base)
set(BCD_FLOOR_cli_USES runtime dist optim report memory model data io kernels base)

# Source folder of a floor: src/<floor>, but the kernels (CUDA and CPU SIMD) sit at the top of
# the tree, kernels/, where the design's layout puts them.
function(bcd_floor_source_dir floor out)
  if(floor STREQUAL "kernels")
    set(${out} ${PROJECT_SOURCE_DIR}/kernels PARENT_SCOPE)
  else()
    set(${out} ${PROJECT_SOURCE_DIR}/src/${floor} PARENT_SCOPE)
  endif()
endfunction()

# The floors of the code (DESIGN.md §5): which folder's headers each folder may include.
# Arrows point down only; folders on one floor (model | memory, io | kernels) do not use each
# other. The build (CMakeLists.txt: one library per folder) and the layering checks
# (tests/layering/) read this one table; a folder missing from it is an error there.
#
#   runtime   trainer, BCD scheduler, optimizer glue, distributed, CLI
#   model     Llama family, HF formats, weights files      memory   tiers, slab pool, planner, stager
#   io        io_uring engine, extent store, checkpoints, datasets, tokenizer    kernels   AdamW, copy streams
#   base      errors, config structs and loading, byte sizes, progress
set(BCD_FLOORS base kernels io model memory runtime)
set(BCD_FLOOR_base_USES "")
set(BCD_FLOOR_kernels_USES base)
set(BCD_FLOOR_io_USES base)
set(BCD_FLOOR_model_USES io kernels base)
set(BCD_FLOOR_memory_USES io kernels base)
set(BCD_FLOOR_runtime_USES memory model io kernels base)

# Source folder of a floor: kernels/ sits at the top of the tree, the others under src/.
function(bcd_floor_source_dir floor out)
  if(floor STREQUAL "kernels")
    set(${out} ${PROJECT_SOURCE_DIR}/kernels PARENT_SCOPE)
  else()
    set(${out} ${PROJECT_SOURCE_DIR}/src/${floor} PARENT_SCOPE)
  endif()
endfunction()

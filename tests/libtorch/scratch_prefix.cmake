# Shared by the checks of this folder (run with cmake -P; TORCH_DIR, CXX_COMPILER, C_COMPILER set).
# scratch_torch_prefix(PREFIX CODE): a LibTorch prefix whose TorchConfig.cmake includes the real
# one, then runs CODE (what the LibTorch being imitated does differently).
function(scratch_torch_prefix prefix code)
  set(config_dir ${prefix}/share/cmake/Torch)
  file(WRITE ${config_dir}/TorchConfig.cmake "include(\"${TORCH_DIR}/TorchConfig.cmake\")\n${code}")
  if(EXISTS ${TORCH_DIR}/TorchConfigVersion.cmake)
    file(WRITE ${config_dir}/TorchConfigVersion.cmake "include(\"${TORCH_DIR}/TorchConfigVersion.cmake\")\n")
  endif()
endfunction()

# The compilers of the build that registered the check, for the scratch configurations.
set(scratch_compilers "")
foreach(lang CXX C)
  if(${lang}_COMPILER)
    list(APPEND scratch_compilers -DCMAKE_${lang}_COMPILER=${${lang}_COMPILER})
  endif()
endforeach()

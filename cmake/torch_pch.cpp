// Empty: the translation unit that precompiles LibTorch's headers (bcd_torch_pch in CMakeLists.txt).

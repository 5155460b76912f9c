// Package gpu is the real-GPU suite (`make test-gpu`): the claims gpuslice makes,
// checked and measured with driver-API programs whose kernels are PTX (JIT by the
// driver, no CUDA toolkit). It runs on a real NVIDIA driver when one is present and,
// with GPUSLICE_DRIVER=sim, the same code runs on the simulated GPU. Nothing in it
// depends on the simulator: the only difference between the two is which libcuda
// the programs load. See README.md.
package gpu

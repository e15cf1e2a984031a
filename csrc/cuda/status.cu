/* status.cu: the device to launch on, CUDA errors by name, and reading a
 * check's flag back to the host. */
#include "tsgu_cuda_dev.cuh"

extern "C" const char *tsgu_cuda_error_name(int e) { return cudaGetErrorName((cudaError_t)e); }
extern "C" const char *tsgu_cuda_error_string(int e) { return cudaGetErrorString((cudaError_t)e); }

extern "C" int tsgu_cuda_read_flag(const int *flag, int *host, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaMemcpyAsync(host, flag, sizeof *host, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? TSGU_OK : TSGU_ECUDA + (int)e;
}

extern "C" int tsgu_cuda_use_device(int device)
{
    cudaError_t e = cudaSetDevice(device);
    return e == cudaSuccess ? TSGU_OK : TSGU_ECUDA + (int)e;
}

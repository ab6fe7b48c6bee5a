// DLPack's enumerations, spelled once: each row is a constant of the Rust newtype, its value,
// its C enumerator, the name dlpx prints for it (Python, C++), and, for dtype codes, the bit
// width the code fixes (0: any). Rows marked `since "main after 1.3"` come from DLPack's main branch after
// v1.3: dlpx names, imports and exports them, while its `dlpack.h` stays the 1.3 header (they
// are `DLPX_<enumerator>` macros in `dlpx.h`).
//
// This file is read twice: by the crate (`abi::enums`), where `dlpack_enums!` makes the
// newtypes' constants and name tables, and by `build.rs`, where the same macro name writes
// the C enums and the name tables of the generated headers.

dlpack_enums! {
    /// The device type in DLDevice.
    enum DLDeviceType for DeviceType(i32) {
        /// CPU device.
        CPU = 1, kDLCPU, "cpu";
        /// CUDA GPU device.
        CUDA = 2, kDLCUDA, "cuda";
        /// Pinned CUDA CPU memory by cudaMallocHost.
        CUDA_HOST = 3, kDLCUDAHost, "cuda_host";
        /// OpenCL devices.
        OPENCL = 4, kDLOpenCL, "opencl";
        /// Vulkan buffer for next generation graphics.
        VULKAN = 7, kDLVulkan, "vulkan";
        /// Metal for Apple GPU.
        METAL = 8, kDLMetal, "metal";
        /// Verilog simulator buffer.
        VPI = 9, kDLVPI, "vpi";
        /// ROCm GPUs for AMD GPUs.
        ROCM = 10, kDLROCM, "rocm";
        /// Pinned ROCm CPU memory allocated by hipMallocHost.
        ROCM_HOST = 11, kDLROCMHost, "rocm_host";
        /// Reserved extension device type, used for quickly testing extension devices.
        EXT_DEV = 12, kDLExtDev, "ext_dev";
        /// CUDA managed/unified memory allocated by cudaMallocManaged.
        CUDA_MANAGED = 13, kDLCUDAManaged, "cuda_managed";
        /// Unified shared memory allocated on a oneAPI non-partitioned device.
        ONEAPI = 14, kDLOneAPI, "oneapi";
        /// GPU support for next generation WebGPU standard.
        WEBGPU = 15, kDLWebGPU, "webgpu";
        /// Qualcomm Hexagon DSP.
        HEXAGON = 16, kDLHexagon, "hexagon";
        /// Microsoft MAIA devices.
        MAIA = 17, kDLMAIA, "maia";
        /// AWS Trainium.
        TRN = 18, kDLTrn, "trn";
        /// Google TPU.
        TPU = 19, kDLTPU, "tpu", since "main after 1.3";
        /// Pinned host memory of a Google TPU.
        TPU_HOST = 20, kDLTPUHost, "tpu_host", since "main after 1.3";
        /// Huawei Ascend NPU.
        ASCEND = 21, kDLAscend, "ascend", since "main after 1.3";
    }

    /// The type code options of DLDataType.
    enum DLDataTypeCode for DataTypeCode(u8) {
        /// Signed integer.
        INT = 0, kDLInt, "int";
        /// Unsigned integer.
        UINT = 1, kDLUInt, "uint";
        /// IEEE floating point.
        FLOAT = 2, kDLFloat, "float";
        /// Opaque handle type, reserved for testing purposes.
        OPAQUE_HANDLE = 3, kDLOpaqueHandle, "handle";
        /// bfloat16.
        BFLOAT = 4, kDLBfloat, "bfloat16", bits 16;
        /// Complex number (C/C++/Python layout: compact struct per complex number).
        COMPLEX = 5, kDLComplex, "complex";
        /// Boolean.
        BOOL = 6, kDLBool, "bool", bits 8;
        /// FP8 data types.
        FLOAT8_E3M4 = 7, kDLFloat8_e3m4, "float8_e3m4", bits 8;
        FLOAT8_E4M3 = 8, kDLFloat8_e4m3, "float8_e4m3", bits 8;
        FLOAT8_E4M3B11FNUZ = 9, kDLFloat8_e4m3b11fnuz, "float8_e4m3b11fnuz", bits 8;
        FLOAT8_E4M3FN = 10, kDLFloat8_e4m3fn, "float8_e4m3fn", bits 8;
        FLOAT8_E4M3FNUZ = 11, kDLFloat8_e4m3fnuz, "float8_e4m3fnuz", bits 8;
        FLOAT8_E5M2 = 12, kDLFloat8_e5m2, "float8_e5m2", bits 8;
        FLOAT8_E5M2FNUZ = 13, kDLFloat8_e5m2fnuz, "float8_e5m2fnuz", bits 8;
        FLOAT8_E8M0FNU = 14, kDLFloat8_e8m0fnu, "float8_e8m0fnu", bits 8;
        /// FP6 data types; bits must be 6.
        FLOAT6_E2M3FN = 15, kDLFloat6_e2m3fn, "float6_e2m3fn", bits 6;
        FLOAT6_E3M2FN = 16, kDLFloat6_e3m2fn, "float6_e3m2fn", bits 6;
        /// FP4 data types; bits must be 4.
        FLOAT4_E2M1FN = 17, kDLFloat4_e2m1fn, "float4_e2m1fn", bits 4;
        /// Complex bfloat16: two bfloat16 halves per element (bits = 32).
        BCOMPLEX = 18, kDLBcomplex, "bcomplex32", bits 32, since "main after 1.3";
    }
}

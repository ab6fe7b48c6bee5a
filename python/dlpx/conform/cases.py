"""The arrays every producer is read in, by producer.py's checks and protocols.py's alike: each
dtype a library may have, and each layout."""

# name -> (code, bits, lanes): every dtype a library may have (000 DLDataTypeCode).
DTYPES = {
    "bool": (6, 8, 1), "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1), "int64": (0, 64, 1),
    "uint8": (1, 8, 1), "uint16": (1, 16, 1), "uint32": (1, 32, 1), "uint64": (1, 64, 1),
    "float16": (2, 16, 1), "float32": (2, 32, 1), "float64": (2, 64, 1), "bfloat16": (4, 16, 1),
    "complex64": (5, 64, 1), "complex128": (5, 128, 1),
    "float8_e3m4": (7, 8, 1), "float8_e4m3": (8, 8, 1), "float8_e4m3b11fnuz": (9, 8, 1), "float8_e4m3fn": (10, 8, 1),
    "float8_e4m3fnuz": (11, 8, 1), "float8_e5m2": (12, 8, 1), "float8_e5m2fnuz": (13, 8, 1), "float8_e8m0fnu": (14, 8, 1),
    "float4_e2m1fn": (17, 4, 1),
}

# (name, build(make), shape, values in row-major order): the layouts every producer is read in.
LAYOUT_CASES = [
    ("contiguous", lambda make: make((2, 3), "float32"), (2, 3), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
    ("non_contiguous", lambda make: make((2, 3), "float32")[:, ::2], (2, 2), [0.0, 2.0, 3.0, 5.0]),
    ("negative_strides", lambda make: make((2, 3), "float32")[::-1, :], (2, 3), [3.0, 4.0, 5.0, 0.0, 1.0, 2.0]),
    ("zero_d", lambda make: make((), "float32"), (), [0.0]),
    ("zero_size", lambda make: make((0, 3), "float32"), (0, 3), []),
]

#!/usr/bin/python3
"""make_corpus.py - writes the malformed ENVI corpus in this folder and its
manifest cases.txt (FILE <tab> STATUS <tab> words the error must contain;
STATUS WARN: the cube opens and one of its warnings contains the words),
and the seeds of tests/fuzz/fuzz_envi_file.c (seeds-fuzz_envi_file/).
tests/test_envi_malformed.c opens every FILE with hsi_envi_open, and the
same header and data bytes with hsi_envi_open_memory, and checks the status
and the words. Run from anywhere: /usr/bin/python3 make_corpus.py
"""
import gzip
import os

HERE = os.path.dirname(os.path.abspath(__file__))

GOOD = {"samples": "4", "lines": "3", "bands": "2", "header offset": "0",
        "file type": "ENVI Standard", "data type": "2", "interleave": "bsq",
        "byte order": "0"}
ORDER = list(GOOD)


def header(drop=(), magic="ENVI", extra="", **over):
    keys = dict(GOOD)
    for k, v in over.items():
        keys[k.replace("_", " ")] = v
    text = magic + "\n" if magic is not None else ""
    for k in ORDER:
        if k not in drop:
            text += "%s = %s\n" % (k, keys[k])
    return text + extra


CASES = []  # (name, status, words, header text or bytes, data bytes or None, data name)


def case(name, status, words, hdr, data=None, data_name=None):
    CASES.append((name, status, words, hdr, data, data_name))


D48 = bytes(range(48))  # 4 x 3 x 2 x int16
for k in ["samples", "lines", "bands", "data type", "interleave"]:
    case("missing_%s" % k.replace(" ", "_"), "FORMAT", "missing required key '%s'" % k,
         header(drop=(k,)), D48)
case("only_magic", "FORMAT", "missing required key 'samples'", "ENVI\n")
case("zero_samples", "FORMAT", "'samples' must be > 0, found 0", header(samples="0"), D48)
case("zero_bands", "FORMAT", "'bands' must be > 0, found 0", header(bands="0"), D48)
case("negative_lines", "FORMAT", "'lines' must be > 0, found -3", header(lines="-3"), D48)
case("huge_bands", "FORMAT", "'bands' = 99999999 is outside 1..1048576 (the cap)",
     header(bands="99999999"), D48)
case("huge_samples", "FORMAT", "'samples' = 3000000000 is outside 1..2147483647 (the cap)",
     header(samples="3000000000"), D48)
case("samples_text", "FORMAT", "'samples' must be an integer, found 'ten'",
     header(samples="ten"), D48)
case("samples_trailing", "FORMAT", "'samples' must be an integer, found '4 px'",
     header(samples="4 px"), D48)
case("samples_exponent", "FORMAT", "'samples' must be an integer, found '4e0'",
     header(samples="4e0"), D48)
case("samples_beyond_int64", "FORMAT",
     "'samples' = 99999999999999999999 is outside 1..2147483647 (the cap)",
     header(samples="99999999999999999999"), D48)
case("samples_uint64_max", "FORMAT",
     "'samples' = 18446744073709551615 is outside 1..2147483647 (the cap)",
     header(samples="18446744073709551615"), D48)
case("lines_below_int64", "FORMAT", "'lines' must be > 0, found -99999999999999999999",
     header(lines="-99999999999999999999"), D48)
case("header_offset_beyond_int64", "FORMAT",
     "'header offset' = 99999999999999999999 is outside 0..9223372036854775807 (the range of a "
     "64-bit integer)", header(header_offset="99999999999999999999"), D48)
case("size_product_overflow", "OVERFLOW", "overflows 64 bits",
     header(samples="2147483647", lines="2147483647", bands="1048576", data_type="9"), D48)
case("offset_overflow", "OVERFLOW", "overflows 64 bits",
     header(header_offset="9223372036854775807"), D48)
case("unknown_data_type_7", "FORMAT", "unknown 'data type' '7'", header(data_type="7"), D48)
case("unknown_data_type_0", "FORMAT", "unknown 'data type' '0'", header(data_type="0"), D48)
case("data_type_16_not_envi", "FORMAT", "unknown 'data type' '16'", header(data_type="16"), D48)
case("data_type_word", "FORMAT", "unknown 'data type' 'float'", header(data_type="float"), D48)
case("bad_interleave", "FORMAT", "'interleave' must be bsq, bil or bip, found 'bsx'",
     header(interleave="bsx"), D48)
case("bad_byte_order", "FORMAT", "'byte order' must be 0 or 1, found '2'",
     header(byte_order="2"), D48)
case("negative_header_offset", "FORMAT", "'header offset' = -5 is outside 0..",
     header(header_offset="-5"), D48)
case("compression_2", "FORMAT", "'file compression' = 2 is outside 0..1",
     header(extra="file compression = 2\n"), D48)
case("frame_offsets_3_values", "FORMAT", "'major frame offsets' must have 1 or 2 values",
     header(extra="major frame offsets = {1, 2, 3}\n"), D48)
case("minor_frame_offsets", "UNSUPPORTED", "'minor frame offsets' {2, 0} are not supported",
     header(extra="minor frame offsets = {2, 0}\n"), D48)
case("unterminated_brace", "FORMAT", "unterminated '{' in the value of key 'wavelength'",
     header(extra="wavelength = {400, 500,\n600\n"), D48)
case("binary_garbage", "FORMAT", "not an ENVI header: binary byte 0x00",
     b"ENVI\nsamples = 4\n\x00\x01\x02\xff\xfe lines = 3\n", D48)
case("binary_png", "FORMAT", "not an ENVI header: binary byte",
     b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", D48)
case("empty", "FORMAT", "not an ENVI header: the file is empty", "", D48)
case("esri_bil", "FORMAT", "not an ENVI header: the first line is 'BYTEORDER I'",
     "BYTEORDER I\nLAYOUT BIL\nNROWS 3\nNCOLS 4\nNBANDS 2\nNBITS 16\n", D48)
case("no_magic_no_keys", "FORMAT", "not an ENVI header: the first line is 'hello world'",
     "hello world\nfoo = bar\n", D48)
case("truncated_data", "FORMAT", "data file is 40 bytes, expected 48", header(), D48[:40])
case("empty_data", "FORMAT", "data file is 0 bytes, expected 48", header(), b"")
case("wrong_data_type_size", "FORMAT", "a data type of 1 bytes per value would explain it",
     header(), D48[:24])
case("header_offset_too_big", "FORMAT", "a header offset of 0 would explain the size",
     header(header_offset="100"), D48)
case("missing_data", "NOT_FOUND", "data file not found (tried missing_data, missing_data.img,",
     header())
case("gzip_short", "FORMAT", "the gzip stream inflates to 30 bytes, expected 48",
     header(extra="file compression = 1\n"), gzip.compress(D48[:30], mtime=0))
case("gzip_corrupt", "FORMAT", "gzip stream broken",
     header(extra="file compression = 1\n"),
     gzip.compress(D48, mtime=0)[:12] + b"\xff" * 40)
case("gzip_bomb_header", "FORMAT", "cannot inflate to the 17179869184 bytes",
     header(samples="65536", lines="65536", extra="file compression = 1\n"),
     gzip.compress(D48, mtime=0))

case("gzip_not_gzip", "FORMAT",
     "the header says 'file compression = 1' (gzip) but the data is not gzip: it starts with "
     "bytes 00 01 02 03, not the gzip magic 1f 8b", header(extra="file compression = 1\n"), D48)
case("gzip_no_trailer", "FORMAT", "gzip stream broken after 48 bytes",
     header(extra="file compression = 1\n"), gzip.compress(D48, mtime=0)[:-8])

# Not fatal (STATUS WARN): the cube opens, and a warning names the key, the
# item and what was wrong; the typed field is left unset (tested in C too).
case("wavelength_nan", "WARN", "'wavelength' item 2 is 'nan', not a finite number (key ignored)",
     header(extra="wavelength units = Nanometers\nwavelength = {400, nan}\n"), D48)
case("wavelength_inf", "WARN", "'wavelength' item 1 is 'inf', not a finite number (key ignored)",
     header(extra="wavelength = {inf, 800}\n"), D48)
case("wavelength_1e400", "WARN",
     "'wavelength' item 2 is '1e400', not a finite number (key ignored)",
     header(extra="wavelength = {400, 1e400}\n"), D48)
case("fwhm_nan", "WARN", "'fwhm' item 1 is 'NaN', not a finite number (key ignored)",
     header(extra="wavelength = {400, 800}\nfwhm = {NaN, 10}\n"), D48)
case("map_info_nan_pixel", "WARN",
     "'map info' item 6 (pixel size x) is 'nan', not a finite number (map info not used: no "
     "georeferencing)",
     header(extra="map info = {UTM, 1, 1, 500000, 4100000, nan, 30, 33, North, WGS-84}\n"), D48)
case("map_info_zero_pixel", "WARN",
     "'map info' pixel size 30 x 0 (items 6 and 7) must be > 0 (map info not used",
     header(extra="map info = {UTM, 1, 1, 500000, 4100000, 30, 0, 33, North, WGS-84}\n"), D48)
case("map_info_nan_rotation", "WARN",
     "'map info' rotation 'nan' is not a finite number of degrees (map info not used",
     header(extra="map info = {UTM, 1, 1, 500000, 4100000, 30, 30, 33, North, WGS-84, "
                  "rotation=nan}\n"), D48)
case("map_info_inf_easting", "WARN", "'map info' item 4 (easting) is 'inf', not a finite number",
     header(extra="map info = {UTM, 1, 1, inf, 4100000, 30, 30, 33, North, WGS-84}\n"), D48)
case("reflectance_scale_nan", "WARN",
     "'reflectance scale factor' 'nan' is not a finite non-zero number (ignored)",
     header(extra="reflectance scale factor = nan\n"), D48)

# a header named as its own data file (no .hdr, no other candidate)
SELF = ("header_self", "FORMAT", "the header is named as its own data file", header())


# Seeds of tests/fuzz/fuzz_envi_file.c: header, one NUL byte, data bytes.
# Every case above that has data, and these cubes that open.
SEEDS_DIR = os.path.join(HERE, "..", "fuzz", "seeds-fuzz_envi_file")
RICH = ("wavelength units = Micrometers\nwavelength = {0.4, 0.8}\nfwhm = {0.01, 0.01}\n"
        "bbl = {1, 0}\nband names = {a, b}\ndata gain values = {1, 2}\n"
        "default bands = {1}\ndata ignore value = -1\nreflectance scale factor = 10000\n"
        "map info = {UTM, 1, 1, 500000, 4100000, 30, 30, 33, North, WGS-84, units=Meters, "
        "rotation=15}\ndescription = {a\n  multi-line ; text}\n")
GOOD_SEEDS = [
    ("good_bsq_i16", header(), D48),
    ("good_bil_big_endian", header(interleave="bil", byte_order="1"), D48),
    ("good_bip_f32", header(samples="2", lines="2", bands="3", data_type="4", interleave="bip"),
     D48),
    ("good_header_offset", header(header_offset="16"), bytes(16) + D48),
    ("good_extra_bytes", header(), D48 + b"tail"),
    ("good_frames_bil", header(interleave="bil", extra="major frame offsets = {2, 2}\n"),
     D48 + bytes(4 * 3)),
    ("good_frames_bsq", header(extra="major frame offsets = {1, 3}\n"), D48 + bytes(4 * 6)),
    ("good_gzip", header(extra="file compression = 1\n"), gzip.compress(D48, mtime=0)),
    ("good_gzip_two_members", header(extra="file compression = 1\n"),
     gzip.compress(D48[:20], mtime=0) + gzip.compress(D48[20:], mtime=0)),
    ("good_gzip_bip_u16", header(data_type="12", interleave="bip",
                                 extra="file compression = 1\n"), gzip.compress(D48, mtime=9)),
    ("good_rich", header(extra=RICH), D48),
    ("good_classification", header(bands="1", data_type="1", file_type="ENVI Classification",
                                   extra="classes = 3\nclass names = {Unclassified, a, b}\n"
                                         "class lookup = {0,0,0, 255,0,0, 0,255,0}\n"),
     bytes([0, 1, 2, 1, 0, 2, 2, 1, 0, 0, 1, 2])),
    ("good_c64", header(samples="1", lines="1", bands="2", data_type="6"), bytes(16)),
]


def write_seeds():
    os.makedirs(SEEDS_DIR, exist_ok=True)
    for f in os.listdir(SEEDS_DIR):
        os.remove(os.path.join(SEEDS_DIR, f))
    seeds = [(n, h, d) for n, _, _, h, d, _ in CASES if d is not None] + GOOD_SEEDS
    for name, hdr, data in seeds:
        hb = hdr.encode() if isinstance(hdr, str) else hdr
        with open(os.path.join(SEEDS_DIR, name), "wb") as fp:
            fp.write(hb + b"\0" + data)
    return len(seeds)


def main():
    for f in os.listdir(HERE):
        if f not in ("make_corpus.py",):
            os.remove(os.path.join(HERE, f))
    lines = ["# FILE\tSTATUS\tWORDS (made by make_corpus.py)"]
    for name, status, words, hdr, data, data_name in CASES:
        hb = hdr.encode() if isinstance(hdr, str) else hdr
        with open(os.path.join(HERE, name + ".hdr"), "wb") as fp:
            fp.write(hb)
        if data is not None:
            with open(os.path.join(HERE, data_name or name), "wb") as fp:
                fp.write(data)
        lines.append("%s.hdr\t%s\t%s" % (name, status, words))
    name, status, words, hdr = SELF
    with open(os.path.join(HERE, name), "w") as fp:
        fp.write(hdr)
    lines.append("%s\t%s\t%s" % (name, status, words))
    with open(os.path.join(HERE, "cases.txt"), "w") as fp:
        fp.write("\n".join(lines) + "\n")
    print("%d cases, %d fuzz seeds" % (len(lines) - 1, write_seeds()))


if __name__ == "__main__":
    main()

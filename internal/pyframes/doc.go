// Package pyframes knows how CPython 3.9 to 3.14 keep their threads and frames in
// memory on x86_64, for the eBPF stack walker (which reads a Python process with
// bpf_probe_read_user) and the collector's userspace symbolizer that build on it.
//
// It holds, per minor version, the byte offsets that lead from the _PyRuntime symbol
// to each interpreter, each thread state (with its pthread and kernel thread ids),
// each frame innermost first, and from a frame to its code object's file, function,
// first line, line table and instruction offset (Layout, LayoutFor); a parser for the
// _Py_DebugOffsets that 3.13 and 3.14 publish at the start of _PyRuntime, so that a
// process's own offsets win over the table (ParseDebugOffsets); the decoders of the
// three line table formats (Line: co_lnotab in 3.9, 3.10's co_linetable, the PEP 657
// location table from 3.11); version detection from a mapped file's name or a
// PY_VERSION_HEX (VersionFromFileName, VersionFromHex); and a bounded reader that walks
// a process through an io.ReaderAt such as /proc/PID/mem (Reader).
//
// Only GIL builds are covered: free-threaded 3.13t and 3.14t lay objects and frames
// out differently and are refused (ErrFreeThreaded), as are debug builds.
//
// What is checked against a live interpreter: 3.11 only (Debian's /usr/bin/python3.11),
// whose line table decoding is compared, code unit by code unit, with the
// interpreter's own co_lines() over snippets that use every location form, and whose
// Layout is followed through a running process's memory to find each thread by its
// native id and walk exactly the stacks sys._current_frames() reports.
//
// Untested against an interpreter: the 3.9, 3.10, 3.12, 3.13 and 3.14 layouts follow
// those versions' headers field by field; their line tables are checked only against
// hand-built tables that follow the format notes; the _Py_DebugOffsets positions of
// 3.13 and 3.14 only against the tests' own reading of the struct's declaration.
package pyframes

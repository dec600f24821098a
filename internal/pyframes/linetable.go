package pyframes

// Line returns the source line of the instruction at instrOffset in a code object of
// Python 3.minor whose co_firstlineno is firstLineNo and whose line table (co_lnotab in
// 3.9, co_linetable from 3.10) is table.
//
// instrOffset counts 2-byte code units from the start of the bytecode in every
// version: in 3.9 that is f_lasti / 2 (f_lasti is in bytes), in 3.10 f_lasti itself,
// from 3.11 (pointer - (code object + Layout.CodeAdaptive)) / 2. A negative offset (a
// frame that has not run its first instruction) is on firstLineNo, as CPython has it.
//
// false means the instruction has no line (3.10's -128, 3.11+'s "no location"
// entries, an offset past the table's end) or the table is malformed or truncated;
// Line never panics and reads nothing outside table.
func Line(minor, firstLineNo int, table []byte, instrOffset int) (int, bool) {
	if instrOffset < 0 {
		return firstLineNo, true
	}
	// Keeps the byte offsets of 3.9 and 3.10 and the line sums far from overflow.
	if instrOffset > 1<<28 || firstLineNo < 0 || firstLineNo > 1<<30 {
		return 0, false
	}
	switch minor {
	case 9:
		return lnotabLine(firstLineNo, table, 2*instrOffset)
	case 10:
		return linetable310Line(firstLineNo, table, 2*instrOffset)
	case 11, 12, 13, 14:
		return locationTableLine(firstLineNo, table, instrOffset)
	}
	return 0, false
}

// lnotabLine reads 3.9's co_lnotab (Objects/lnotab_notes.txt at v3.9.x): pairs of an
// unsigned byte-offset increment and a signed line increment; the line of an address
// is firstlineno plus the line increments of every pair whose accumulated address is
// at most the address (PyCode_Addr2Line). Every address has a line.
func lnotabLine(line int, table []byte, addr int) (int, bool) {
	if len(table)%2 != 0 {
		return 0, false
	}
	at := 0
	for i := 0; i < len(table); i += 2 {
		at += int(table[i])
		if at > addr {
			break
		}
		line += int(int8(table[i+1]))
	}
	return line, line >= 0
}

// linetable310Line reads 3.10's co_linetable (Objects/lnotab_notes.txt at v3.10.x):
// pairs of an unsigned byte-length of an address range and a signed line delta
// applied at the range's start, -128 meaning the range has no line (and leaving the
// running line as it was). A range of length 0 only moves the line. An address past
// the last range has no line.
func linetable310Line(line int, table []byte, addr int) (int, bool) {
	if len(table)%2 != 0 {
		return 0, false
	}
	end := 0
	for i := 0; i < len(table); i += 2 {
		start := end
		end += int(table[i])
		delta := int8(table[i+1])
		rangeLine := -1
		if delta != -128 {
			line += int(delta)
			rangeLine = line
		}
		if start <= addr && addr < end {
			return rangeLine, rangeLine >= 0
		}
	}
	return 0, false
}

// The location table of 3.11+ (PEP 657; Objects/locations.md): a sequence of entries,
// each opening with a byte whose bit 7 is set, bits 3..6 the entry's form and bits
// 0..2 the number of code units it covers minus one.
const (
	locShortLast    = 9  // 0..9: short forms, same line, one byte of columns
	locOneLine0     = 10 // 10..12: the line moves by 0, 1 or 2; start and end column bytes
	locOneLine2     = 12
	locNoColumns    = 13 // svarint line delta, no columns
	locLong         = 14 // svarint line delta, varint end-line delta, varint columns+1
	locNoLocation   = 15
	locEntryStart   = 0x80
	varintMoreBit   = 0x40
	varintValueBits = 0x3f
	varintMaxShift  = 30
)

// locationTableLine walks 3.11+'s co_linetable: every entry's line delta applies to the
// running line (starting at firstlineno) whether or not the entry has a location; a
// "no location" entry covers its code units without a line. Each entry's extra bytes
// must be exactly what its form says, or the table is malformed.
func locationTableLine(line int, table []byte, unit int) (int, bool) {
	start := 0
	for pos := 0; pos < len(table); {
		first := table[pos]
		if first&locEntryStart == 0 {
			return 0, false
		}
		form := int(first>>3) & 15
		length := int(first&7) + 1
		pos++
		delta := 0
		var ok bool
		switch {
		case form <= locShortLast:
			pos, ok = skipPlainBytes(table, pos, 1)
		case form <= locOneLine2:
			delta = form - locOneLine0
			pos, ok = skipPlainBytes(table, pos, 2)
		case form == locNoColumns:
			delta, pos, ok = readSvarint(table, pos)
		case form == locLong:
			delta, pos, ok = readSvarint(table, pos)
			for range 3 { // end line delta, start column + 1, end column + 1
				if ok {
					_, pos, ok = readVarint(table, pos)
				}
			}
		default: // locNoLocation
			ok = true
		}
		if !ok || (pos < len(table) && table[pos]&locEntryStart == 0) {
			return 0, false
		}
		line += delta
		if line < -(1<<30) || line > 1<<30 {
			return 0, false
		}
		if unit < start+length {
			if form == locNoLocation || line < 0 {
				return 0, false
			}
			return line, true
		}
		start += length
	}
	return 0, false
}

// skipPlainBytes steps over n bytes that must not open an entry.
func skipPlainBytes(table []byte, pos, n int) (int, bool) {
	if pos+n > len(table) {
		return pos, false
	}
	for _, b := range table[pos : pos+n] {
		if b&locEntryStart != 0 {
			return pos, false
		}
	}
	return pos + n, true
}

// readVarint reads an unsigned varint of 6-bit chunks, least significant first, bit 6
// set on every chunk but the last.
func readVarint(table []byte, pos int) (int, int, bool) {
	value, shift := 0, 0
	for {
		if pos >= len(table) || shift > varintMaxShift {
			return 0, pos, false
		}
		b := table[pos]
		if b&locEntryStart != 0 {
			return 0, pos, false
		}
		pos++
		value |= int(b&varintValueBits) << shift
		shift += 6
		if b&varintMoreBit == 0 {
			return value, pos, true
		}
	}
}

// readSvarint reads a signed varint: the unsigned value's low bit is the sign and the
// rest the magnitude.
func readSvarint(table []byte, pos int) (int, int, bool) {
	u, pos, ok := readVarint(table, pos)
	if !ok {
		return 0, pos, false
	}
	if u&1 != 0 {
		return -(u >> 1), pos, true
	}
	return u >> 1, pos, true
}

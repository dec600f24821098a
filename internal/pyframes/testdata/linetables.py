# Prints, as one JSON document, every code object compiled from the snippets below
# with its co_firstlineno, co_linetable (hex) and the line CPython itself gives each
# code unit of its bytecode: from co.co_lines() (PyCode_Addr2Line's ranges), checked
# against co.co_positions() and dis's instruction positions, so the Go decoder is held
# to the interpreter's own reading. Run by pyframes' tests with /usr/bin/python3.11.
import dis
import json
import sys

SNIPPETS = {}

SNIPPETS["loops"] = '''
def loops(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        while total < i:
            total += 1
        else:
            total -= 1
    return total
'''

SNIPPETS["multiline"] = '''
def multiline(a, b):
    value = compute(
        a,
        b
            + 1,
        key=lambda x:
            x * 2,
    )
    return (value
            if value
            else
            None)
'''

SNIPPETS["exceptions"] = '''
def exceptions(path):
    try:
        with open(path) as f:
            data = f.read()
    except OSError as e:
        raise RuntimeError(path) from e
    except (ValueError,
            TypeError):
        pass
    else:
        return data
    finally:
        print("done")
'''

SNIPPETS["decorators"] = '''
import functools

@functools.lru_cache(
    maxsize=None,
)
@staticmethod
def decorated(x):
    return x


class Box:
    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, v):
        self._value = v
'''

SNIPPETS["comprehensions"] = '''
def comprehensions(rows):
    squares = [r * r for r in rows if r]
    table = {k: v
             for k, v in
             zip(rows, squares)}
    pairs = {(a, b) for a in rows
             for b in rows}
    gen = (x for x in rows)
    return squares, table, pairs, list(gen)
'''

# A function longer than 256 lines, with a jump of more than 127 lines between two
# statements and columns past 127, to force multi-chunk varints and the long form.
_long_body = ["def long_function(x):", "    y = x"]
for i in range(140):
    _long_body.append("    y = y + %d" % i)
_long_body += ["    # gap"] * 200
_long_body.append("    z = y")
_long_body.append("    w = " + " + ".join("y" for _ in range(60)) + " + (y" + "\n        - z)")
_long_body.append("    return (z,")
_long_body.append("            w)")
SNIPPETS["long"] = "\n".join(_long_body) + "\n"

SNIPPETS["jumps_back"] = '''
def jumps_back(f, a, b):
    return f(


        a,
        b)(
    a)
'''

SNIPPETS["async"] = '''
async def agen(xs):
    async with xs as c:
        async for x in c:
            yield x
    await c.close()
'''


def code_objects(co):
    yield co
    for const in co.co_consts:
        if hasattr(const, "co_code"):
            yield from code_objects(const)


def main():
    out = []
    for name, src in SNIPPETS.items():
        top = compile(src, "<%s>" % name, "exec")
        for co in code_objects(top):
            units = len(co.co_code) // 2
            lines = [None] * units
            for start, end, line in co.co_lines():
                for off in range(start, end, 2):
                    lines[off // 2] = line
            positions = list(co.co_positions())
            if len(positions) != units:
                sys.exit("%s: %d positions for %d code units" % (co.co_name, len(positions), units))
            for unit, pos in enumerate(positions):
                if pos[0] != lines[unit]:
                    sys.exit("%s: unit %d: co_positions line %r, co_lines %r" % (co.co_name, unit, pos[0], lines[unit]))
            for ins in dis.get_instructions(co, show_caches=True):
                if ins.positions.lineno != lines[ins.offset // 2]:
                    sys.exit("%s: offset %d: dis line %r, co_lines %r" % (co.co_name, ins.offset, ins.positions.lineno, lines[ins.offset // 2]))
            out.append({
                "snippet": name,
                "qualname": co.co_qualname,
                "firstlineno": co.co_firstlineno,
                "linetable": co.co_linetable.hex(),
                "lines": lines,
            })
    json.dump({"version": list(sys.version_info[:2]), "code": out}, sys.stdout)


main()

#!/usr/bin/env python3
"""Checks the kernel naming rule (docs/architecture.md, "Kernels") against
the source tree given as the argument:

- every kernel in opencl/kernels/<file>.cl is named kiln_<file>_<what>;
- no name ends in a retired variant marker (_items, _tiled, _local, _rows8,
  a count of values such as 8): _cpu and _gpu are the only ones;
- every launch that names its file and kernel in the C sources
  (kiln_kernel_get, kiln_run, ..., kiln_run_variant, kiln_run_per_row)
  names a kernel of that file, a pair through the selector (the
  *_variant calls append _cpu or _gpu; kiln_run_per_row runs <name> or
  <name>_gpu) and a lone kernel otherwise: a plain call never picks one
  member of a pair."""
import os
import re
import sys

root = sys.argv[1]
kernel_dir = os.path.join(root, 'opencl', 'kernels')
kernels = {}   # file -> set of kernel names
problems = []
for name in sorted(os.listdir(kernel_dir)):
    if not name.endswith('.cl'):
        continue
    file = name[:-3]
    text = open(os.path.join(kernel_dir, name), encoding='utf-8').read()
    found = set(re.findall(r'__kernel\s+void\s+(\w+)\s*\(', text))
    kernels[file] = found
    for k in sorted(found):
        if not k.startswith('kiln_%s_' % file) or k == 'kiln_%s_' % file:
            problems.append('%s.cl: kernel %s is not kiln_%s_<what>' % (file, k, file))
        if re.search(r'(_items|_tiled|_local|_rows8|\d)$', k):
            problems.append('%s.cl: kernel %s ends in a variant marker other than _cpu/_gpu'
                            % (file, k))

PAIR_CALLS = {'kiln_kernel_get_variant', 'kiln_run_variant', 'kiln_run_per_row'}
CALL = re.compile(r'\b(kiln_kernel_get_variant|kiln_kernel_get|kiln_run_variant|'
                  r'kiln_run_per_row|kiln_run_groups|kiln_run1|kiln_run)\s*\(')


def call_text(text, start):
    """The argument text of the call whose '(' is at start."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == '(':
            depth += 1
        elif text[i] == ')':
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return text[start + 1:]


launches = 0
for folder in ('layers', 'runtime', 'opencl', 'comm', 'test'):
    for dirpath, _, names in os.walk(os.path.join(root, folder)):
        for name in names:
            if not name.endswith(('.c', '.h')):
                continue
            path = os.path.join(dirpath, name)
            text = open(path, encoding='utf-8', errors='replace').read()
            for m in CALL.finditer(text):
                strings = re.findall(r'"([^"\\]*)"', call_text(text, m.end() - 1))
                if len(strings) < 2 or strings[0] not in kernels:
                    continue   # a declaration, or a name held in a variable
                fn, file, names_given = m.group(1), strings[0], strings[1:]
                have = kernels[file]
                where = '%s:%d' % (os.path.relpath(path, root), text.count('\n', 0, m.start()) + 1)
                for k in names_given:
                    launches += 1
                    if fn == 'kiln_run_per_row':
                        if k not in have or k + '_gpu' not in have:
                            problems.append('%s: %s names %s, but %s.cl lacks it or %s_gpu'
                                            % (where, fn, k, file, k))
                    elif fn in PAIR_CALLS:
                        if k + '_cpu' not in have and k + '_gpu' not in have:
                            problems.append('%s: %s names %s, but %s.cl has neither %s_cpu nor '
                                            '%s_gpu' % (where, fn, k, file, k, k))
                    elif k not in have:
                        problems.append('%s: %s names %s, which %s.cl does not hold'
                                        % (where, fn, k, file))
                    else:
                        base = k[:-4] if k.endswith(('_cpu', '_gpu')) else k
                        partners = {base + '_cpu', base + '_gpu', base} & have
                        if len(partners) > 1:
                            problems.append('%s: %s picks %s by hand; launch %s through the '
                                            'selector' % (where, fn, k, ' and '.join(sorted(
                                                partners))))

if launches == 0:
    problems.append('no launches found under %s: is it kiln\'s source tree?' % root)
for p in problems:
    print(p)
print('kernel names: %d kernels in %d files, %d launches checked, %d problems'
      % (sum(len(v) for v in kernels.values()), len(kernels), launches, len(problems)))
sys.exit(1 if problems else 0)

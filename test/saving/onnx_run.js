// Runs an ONNX model with ONNX Runtime (onnxruntime-node) for test_onnx.c:
//   node onnx_run.js [--int32] MODEL INPUT OUTPUT D0 D1 ...
// INPUT holds D0 x D1 x ... float32 values (with --int32, int32 ids for a
// model whose input is int32; with --int64, int32 ids given to a model
// whose input is int64, as PyTorch's embeddings take), little-endian, raw; the
// model's one output is written to OUTPUT the same way, and its shape is
// printed as "output NAME D0 D1 ...". NODE_PATH must lead to
// onnxruntime-node (tools/install_onnxruntime.sh).
// A model of several inputs (or outputs):
//   node onnx_run.js --inputs MODEL OUTPUT TYPE:FILE:D0,D1,... ...
// one TYPE (float32, int32, or int64: int32 ids in FILE given as int64; bool: int32
// 0 or 1 in FILE given as bool, PyTorch's key_padding_mask):FILE:shape
// per graph input, in its order;
// OUTPUT gets each sample's outputs one after another in the graph's
// output order, as kiln_model_predict writes them.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function tensor(type, file, shape) {
    const bytes = fs.readFileSync(file);
    const count = shape.reduce((a, b) => a * b, 1);
    if (bytes.length !== 4 * count)
        throw new Error(`${file} holds ${bytes.length} bytes, not ${4 * count}`);
    const ints = type === 'int32' || type === 'int64' || type === 'bool';
    const data = ints ? new Int32Array(count) : new Float32Array(count);
    for (let i = 0; i < count; i++)
        data[i] = ints ? bytes.readInt32LE(4 * i) : bytes.readFloatLE(4 * i);
    const values = type === 'int64' ? BigInt64Array.from(data, (v) => BigInt(v))
        : type === 'bool' ? Uint8Array.from(data, (v) => (v ? 1 : 0)) : data;
    return new ort.Tensor(type, values, shape);
}

function write(output, out) {
    const buf = Buffer.alloc(4 * out.data.length);
    for (let i = 0; i < out.data.length; i++)
        buf.writeFloatLE(out.data[i], 4 * i);
    fs.writeFileSync(output, buf);
}

async function several(args) {
    const [model, output, ...specs] = args;
    const session = await ort.InferenceSession.create(model);
    if (session.inputNames.length !== specs.length)
        throw new Error(`expected ${specs.length} inputs, got ${session.inputNames}`);
    const feeds = {};
    specs.forEach((spec, k) => {
        const [type, file, dims] = spec.split(':');
        feeds[session.inputNames[k]] = tensor(type, file, dims.split(',').map(Number));
    });
    const results = await session.run(feeds);
    const outs = session.outputNames.map((name) => results[name]);
    const n = outs[0].dims[0];
    const packed = [];
    for (let i = 0; i < n; i++)
        for (const out of outs) {
            const size = out.data.length / n;
            for (let j = 0; j < size; j++)
                packed.push(out.data[i * size + j]);
        }
    write(output, {data: packed});
    console.log(`inputs ${session.inputNames.join(' ')} outputs ` +
                session.outputNames.map((name, k) => `${name} ${outs[k].dims.join(' ')}`)
                    .join(', '));
}

async function main() {
    const args = process.argv.slice(2);
    if (args[0] === '--inputs')
        return several(args.slice(1));
    const ints = args[0] === '--int32' || args[0] === '--int64';
    const wide = args[0] === '--int64';
    const [model, input, output, ...dims] = ints ? args.slice(1) : args;
    const shape = dims.map(Number);
    const bytes = fs.readFileSync(input);
    const count = shape.reduce((a, b) => a * b, 1);
    if (bytes.length !== 4 * count)
        throw new Error(`${input} holds ${bytes.length} bytes, not ${4 * count}`);
    const data = ints ? new Int32Array(count) : new Float32Array(count);
    for (let i = 0; i < count; i++)
        data[i] = ints ? bytes.readInt32LE(4 * i) : bytes.readFloatLE(4 * i);
    const session = await ort.InferenceSession.create(model);
    if (session.inputNames.length !== 1 || session.outputNames.length !== 1)
        throw new Error(`expected one input and one output, got ${session.inputNames} ` +
                        `and ${session.outputNames}`);
    const type = wide ? 'int64' : ints ? 'int32' : 'float32';
    const values = wide ? BigInt64Array.from(data, (v) => BigInt(v)) : data;
    const feeds = {[session.inputNames[0]]: new ort.Tensor(type, values, shape)};
    const results = await session.run(feeds);
    const name = session.outputNames[0];
    const out = results[name];
    const buf = Buffer.alloc(4 * out.data.length);
    for (let i = 0; i < out.data.length; i++)
        buf.writeFloatLE(out.data[i], 4 * i);
    fs.writeFileSync(output, buf);
    console.log(`input ${session.inputNames[0]} output ${name} ${out.dims.join(' ')}`);
}

main().catch((e) => {
    console.error(`onnx_run.js: ${e.message || e}`);
    process.exit(1);
});

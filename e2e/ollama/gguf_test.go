package ollama

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
)

// A tiny llama-architecture model written as GGUF (version 3, all tensors
// F32), with random weights: no registry ships trained chat weights here,
// and a model this small loads in a blink and generates fast on a CPU.
//
// Its vocabulary is SentencePiece-style: <unk>, <s>, </s>, the 256 byte
// tokens (<0x00>..<0xFF>, which llama.cpp's byte fallback needs), "▁" and
// the printable ASCII characters. Residual dimension 0 holds a constant no
// layer writes to, so the output layer can keep the control and byte tokens
// far below the printable ones: the model never ends its reply (there is
// no chance of an early </s>) and every piece it streams is a visible
// character. With loop set, every position produces the same hidden state
// and the output layer favours one token overwhelmingly: the model repeats
// "a", as a real model stuck in a loop does.

const (
	ggufF32 = 0 // ggml type

	// GGUF metadata value types.
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9

	tokenNormal  = 1
	tokenUnknown = 2
	tokenControl = 3
	tokenByte    = 6
)

type tinyModel struct {
	embd, layers, heads, ff, ctx int
	loop                         bool
	seed                         uint64
}

type tensor struct {
	name string
	dims []uint64 // ne0 first
	data []float32
}

type kv struct {
	key string
	val any // uint32, int32, float32, bool, string, []string, []float32, []int32
}

func vocab() (tokens []string, types []int32) {
	tokens = []string{"<unk>", "<s>", "</s>"}
	types = []int32{tokenUnknown, tokenControl, tokenControl}
	for b := range 256 {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, tokenByte)
	}
	tokens = append(tokens, "▁")
	types = append(types, tokenNormal)
	for c := byte('!'); c <= '~'; c++ {
		tokens = append(tokens, string(c))
		types = append(types, tokenNormal)
	}
	return tokens, types
}

// write writes the model's GGUF file to path.
func (m tinyModel) write(path string) error {
	rng := rand.New(rand.NewPCG(m.seed, 1))
	tokens, types := vocab()
	n := len(tokens)
	normal := func(std float64) float32 { return float32(rng.NormFloat64() * std) }
	fill := func(count int, f func(i int) float32) []float32 {
		out := make([]float32, count)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	const constDim = 8.0 // residual dimension 0 of every embedding
	var ts []tensor
	// token_embd: n rows of embd.
	ts = append(ts, tensor{"token_embd.weight", []uint64{uint64(m.embd), uint64(n)}, fill(m.embd*n, func(i int) float32 {
		switch {
		case i%m.embd == 0:
			return constDim
		case m.loop:
			return float32(i%m.embd%3) - 1 // the same embedding for every token
		}
		return normal(1)
	})})
	ones := func(k int) []float32 { return fill(k, func(int) float32 { return 1 }) }
	for l := range m.layers {
		p := fmt.Sprintf("blk.%d.", l)
		sq := func(name string, in, out int, std float64, keepDim0 bool) tensor {
			return tensor{p + name, []uint64{uint64(in), uint64(out)}, fill(in*out, func(i int) float32 {
				if m.loop || (keepDim0 && i/in == 0) {
					return 0 // nothing written to the residual (dimension 0)
				}
				return normal(std)
			})}
		}
		ts = append(ts,
			tensor{p + "attn_norm.weight", []uint64{uint64(m.embd)}, ones(m.embd)},
			sq("attn_q.weight", m.embd, m.embd, 0.2, false),
			sq("attn_k.weight", m.embd, m.embd, 0.2, false),
			sq("attn_v.weight", m.embd, m.embd, 0.2, false),
			sq("attn_output.weight", m.embd, m.embd, 0.1, true),
			tensor{p + "ffn_norm.weight", []uint64{uint64(m.embd)}, ones(m.embd)},
			sq("ffn_gate.weight", m.embd, m.ff, 0.2, false),
			sq("ffn_up.weight", m.embd, m.ff, 0.2, false),
			sq("ffn_down.weight", m.ff, m.embd, 0.1, true),
		)
	}
	ts = append(ts, tensor{"output_norm.weight", []uint64{uint64(m.embd)}, ones(m.embd)})
	loopToken := slices.Index(tokens, "a")
	ts = append(ts, tensor{"output.weight", []uint64{uint64(m.embd), uint64(n)}, fill(m.embd*n, func(i int) float32 {
		tok, dim := i/m.embd, i%m.embd
		printable := types[tok] == tokenNormal
		switch {
		case m.loop && tok == loopToken && dim == 0:
			return 10
		case m.loop:
			return 0
		case !printable && dim == 0:
			return -10 // far below: never sampled
		case !printable || dim == 0:
			return 0
		}
		return normal(0.45)
	})})

	scores := make([]float32, n)
	for i := range scores {
		scores[i] = -float32(i)
	}
	kvs := []kv{
		{"general.architecture", "llama"},
		{"general.name", "forge-tiny"},
		{"general.file_type", uint32(0)}, // all F32
		{"llama.context_length", uint32(m.ctx)},
		{"llama.embedding_length", uint32(m.embd)},
		{"llama.block_count", uint32(m.layers)},
		{"llama.feed_forward_length", uint32(m.ff)},
		{"llama.attention.head_count", uint32(m.heads)},
		{"llama.attention.head_count_kv", uint32(m.heads)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.rope.dimension_count", uint32(m.embd / m.heads)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.vocab_size", uint32(n)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.unknown_token_id", uint32(0)},
		{"tokenizer.ggml.bos_token_id", uint32(1)},
		{"tokenizer.ggml.eos_token_id", uint32(2)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := &ggufWriter{w: bufio.NewWriter(f)}
	w.raw([]byte("GGUF"))
	w.u32(3)
	w.u64(uint64(len(ts)))
	w.u64(uint64(len(kvs)))
	for _, e := range kvs {
		w.str(e.key)
		w.value(e.val)
	}
	const align = 32
	offset := uint64(0)
	for _, t := range ts {
		w.str(t.name)
		w.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			w.u64(d)
		}
		w.u32(ggufF32)
		w.u64(offset)
		offset += pad(uint64(len(t.data))*4, align)
	}
	w.raw(make([]byte, pad(w.n, align)-w.n))
	for _, t := range ts {
		size := uint64(len(t.data)) * 4
		for _, v := range t.data {
			w.u32(math.Float32bits(v))
		}
		w.raw(make([]byte, pad(size, align)-size))
	}
	if w.err == nil {
		w.err = w.w.Flush()
	}
	if err := f.Close(); w.err == nil {
		w.err = err
	}
	return w.err
}

func pad(n, align uint64) uint64 { return (n + align - 1) / align * align }

// ggufWriter writes little-endian GGUF values, keeping the first error.
type ggufWriter struct {
	w   *bufio.Writer
	n   uint64
	err error
}

func (w *ggufWriter) raw(b []byte) {
	if w.err != nil {
		return
	}
	k, err := w.w.Write(b)
	w.n += uint64(k)
	w.err = err
}

func (w *ggufWriter) u32(v uint32) { w.raw(binary.LittleEndian.AppendUint32(nil, v)) }
func (w *ggufWriter) u64(v uint64) { w.raw(binary.LittleEndian.AppendUint64(nil, v)) }

func (w *ggufWriter) str(s string) {
	w.u64(uint64(len(s)))
	w.raw([]byte(s))
}

func (w *ggufWriter) value(v any) {
	switch v := v.(type) {
	case uint32:
		w.u32(ggufUint32)
		w.u32(v)
	case int32:
		w.u32(ggufInt32)
		w.u32(uint32(v))
	case float32:
		w.u32(ggufFloat32)
		w.u32(math.Float32bits(v))
	case bool:
		w.u32(ggufBool)
		if v {
			w.raw([]byte{1})
		} else {
			w.raw([]byte{0})
		}
	case string:
		w.u32(ggufString)
		w.str(v)
	case []string:
		w.u32(ggufArray)
		w.u32(ggufString)
		w.u64(uint64(len(v)))
		for _, s := range v {
			w.str(s)
		}
	case []float32:
		w.u32(ggufArray)
		w.u32(ggufFloat32)
		w.u64(uint64(len(v)))
		for _, f := range v {
			w.u32(math.Float32bits(f))
		}
	case []int32:
		w.u32(ggufArray)
		w.u32(ggufInt32)
		w.u64(uint64(len(v)))
		for _, i := range v {
			w.u32(uint32(i))
		}
	default:
		w.err = fmt.Errorf("gguf: unsupported value %T", v)
	}
}

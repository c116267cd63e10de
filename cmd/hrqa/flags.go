package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// parseFlags parses args into fs and returns the positional arguments.
// Unlike fs.Parse it accepts flags after positional arguments
// ("consume lines -limit 10"), and a flag's value may start with a dash
// ("-offset -1"). An argument that is a negative number and no flag of fs
// is positional; "--" ends the flags. -h and -help return flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "h" || name == "help" {
			return nil, flag.ErrHelp
		}
		f := fs.Lookup(name)
		if f == nil {
			if isNumber(a) {
				pos = append(pos, a)
				continue
			}
			return nil, usagef("unknown flag -%s", name)
		}
		if !hasValue && !isBoolFlag(f) {
			if i+1 == len(args) {
				return nil, usagef("flag -%s needs a value", name)
			}
			i++
			value, hasValue = args[i], true
		}
		if hasValue {
			flags = append(flags, "-"+name+"="+value)
		} else {
			flags = append(flags, "-"+name)
		}
	}
	fs.SetOutput(io.Discard) // errors are reported by the caller, once
	if err := fs.Parse(flags); err != nil {
		return nil, usagef("%s", err.Error())
	}
	return pos, nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// delimFlags are the -d and -0 flags of produce and consume.
type delimFlags struct {
	delim string
	nul   bool
}

func (d *delimFlags) register(fs *flag.FlagSet, verb string) {
	fs.StringVar(&d.delim, "d", "", "delimiter that "+verb+" messages, default newline; accepts \\n \\t \\r \\0 \\\\ and \\xHH")
	fs.BoolVar(&d.nul, "0", false, "NUL-delimited messages (same as -d '\\0')")
}

// bytes returns the delimiter the flags select.
func (d *delimFlags) bytes(fs *flag.FlagSet) ([]byte, error) {
	if d.nul {
		if isSet(fs, "d") {
			return nil, usagef("-0 and -d exclude each other")
		}
		return []byte{0}, nil
	}
	if !isSet(fs, "d") {
		return []byte{'\n'}, nil
	}
	delim, err := unescape(d.delim)
	if err != nil {
		return nil, usagef("-d %q: %v", d.delim, err)
	}
	if len(delim) == 0 {
		return nil, usagef("-d must not be empty")
	}
	return delim, nil
}

// unescape replaces the escapes \n \t \r \0 \\ and \xHH in s.
func unescape(s string) ([]byte, error) {
	var b bytes.Buffer
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return nil, errors.New("trailing backslash")
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\':
			b.WriteByte('\\')
		case 'x':
			if i+2 >= len(s) {
				return nil, errors.New(`\x needs two hex digits`)
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return nil, fmt.Errorf(`\x%s: not two hex digits`, s[i+1:i+3])
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			return nil, fmt.Errorf(`unknown escape \%c`, s[i])
		}
	}
	return b.Bytes(), nil
}

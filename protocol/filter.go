package protocol

import (
	"fmt"
	"regexp"
	"regexp/syntax"
)

// MaxRegexInsts bounds the size of a list-topics regex once its
// repetitions are counted out: `(?:a?){1000}` repeated a few hundred times
// fits in MaxRegexLen bytes but compiles to hundreds of thousands of
// instructions, seconds of CPU to compile and to match. Real filters are a
// few dozen.
const MaxRegexInsts = 5000

// CompileTopicFilter compiles the regex of a list-topics request, refusing
// (with ErrInvalidArgument) one longer than MaxRegexLen, one that does not
// parse, and one whose program would exceed MaxRegexInsts. Its cost is
// bounded before anything is expanded: the parse tree's size is estimated
// with every repetition counted out.
func CompileTopicFilter(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxRegexLen {
		return nil, fmt.Errorf("%w: regex of %d bytes, at most %d", ErrInvalidArgument, len(expr), MaxRegexLen)
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("%w: regex: %w", ErrInvalidArgument, err)
	}
	if n := regexSize(re, MaxRegexInsts+1); n > MaxRegexInsts {
		return nil, fmt.Errorf("%w: regex too complex: over %d instructions once its repetitions are expanded", ErrInvalidArgument, MaxRegexInsts)
	}
	c, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: regex: %w", ErrInvalidArgument, err)
	}
	return c, nil
}

// regexSize estimates the instructions re compiles to, counting each
// repetition out; it stops counting at limit.
func regexSize(re *syntax.Regexp, limit int) int {
	n := 1
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune) + 1
	case syntax.OpRepeat:
		times := re.Max
		if times < 0 {
			times = re.Min + 1
		}
		sub := regexSize(re.Sub[0], limit)
		if times > 0 && sub > limit/times {
			return limit
		}
		n = times*sub + times + 1
	default:
		for _, s := range re.Sub {
			n += regexSize(s, limit)
			if n >= limit {
				return limit
			}
		}
	}
	return min(n, limit)
}

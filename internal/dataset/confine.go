package dataset

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// refusal is an index path the exporter will not follow: it could leave
// the capture (or the export) or name a file of another kind.
type refusal struct{ why string }

func (r *refusal) Error() string { return r.why }

// confined resolves rel, a path from the index, inside the capture
// directory root (absolute, symlinks already resolved). The index is data,
// not a path list: an absolute path, a .., a path that is not clean, a
// symlink anywhere along it or a name without the expected suffix is a
// *refusal; a file that is not there wraps fs.ErrNotExist.
func confined(root, rel, suffix string) (string, error) {
	if err := checkRelative(rel); err != nil {
		return "", err
	}
	if !strings.HasSuffix(rel, suffix) {
		return "", &refusal{fmt.Sprintf("%q is not a %s file", rel, suffix)}
	}
	path := root
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		path = filepath.Join(path, part)
		st, err := os.Lstat(path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("%s: %w", rel, fs.ErrNotExist)
			}
			return "", err
		}
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			return "", &refusal{fmt.Sprintf("%q goes through a symlink", rel)}
		case i < len(parts)-1 && !st.IsDir():
			return "", fmt.Errorf("%s: %w", rel, fs.ErrNotExist)
		case i == len(parts)-1 && !st.Mode().IsRegular():
			return "", &refusal{fmt.Sprintf("%q is not a regular file", rel)}
		}
	}
	return path, nil
}

// checkRelative refuses an index path that is absolute, climbs with ..,
// or is not clean ("a//b", "./a"), written with / as the index has it.
func checkRelative(rel string) error {
	switch {
	case rel == "":
		return &refusal{"an empty path"}
	case strings.HasPrefix(rel, "/") || filepath.IsAbs(rel):
		return &refusal{fmt.Sprintf("%q is an absolute path", rel)}
	case slices.Contains(strings.Split(rel, "/"), ".."):
		return &refusal{fmt.Sprintf("%q climbs out with ..", rel)}
	case strings.ContainsRune(rel, '\\') || strings.ContainsRune(rel, 0) || filepath.ToSlash(filepath.Clean(rel)) != rel:
		return &refusal{fmt.Sprintf("%q is not a clean relative path", rel)}
	}
	return nil
}

// within says whether path is dir or inside it (both absolute and clean).
func within(path, dir string) bool {
	if path == dir {
		return true
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// realPath makes path absolute and resolves its symlinks; a path (or its
// tail) that does not exist yet is resolved as far as it exists.
func realPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var tail []string
	for dir := abs; ; {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(append([]string{real}, tail...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs, nil
		}
		tail = append([]string{filepath.Base(dir)}, tail...)
		dir = parent
	}
}

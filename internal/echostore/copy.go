package echostore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// OpenCopy copies the store file at path (and its WAL) into a private temporary
// directory and opens the copy, migrated like any store; Close removes it. The original
// is never opened, so it may belong to a running gateway that holds its lock: this is
// how `fathom mcp --db` and `fathom explain --db` read a file copied off a gateway, or
// the live one, without taking it from the writer.
func OpenCopy(ctx context.Context, path string) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store file: %w", err)
	}
	dir, err := os.MkdirTemp("", "fathom-tools-")
	if err != nil {
		return nil, err
	}
	copyPath := filepath.Join(dir, filepath.Base(path))
	if err := copyStoreFiles(path, copyPath); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s, err := Open(ctx, Options{Path: copyPath})
	if err != nil {
		os.RemoveAll(dir)
		return nil, &copyOpenError{msg: strings.ReplaceAll(err.Error(), copyPath, path), err: err}
	}
	s.copyDir = dir
	return s, nil
}

// copyStoreFiles copies the file and, when there is one, its WAL: rows committed since
// the last checkpoint live only in the WAL.
func copyStoreFiles(from, to string) error {
	if err := copyFile(from, to); err != nil {
		return err
	}
	if _, err := os.Stat(from + ".wal"); err == nil {
		return copyFile(from+".wal", to+".wal")
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", from, err)
	}
	return out.Close()
}

// copyOpenError is a failed open of the copy told in the words of the file the user
// gave: the copy's path is a temporary one, gone by the time anyone reads the message,
// and DuckDB and the migrations name the file they opened. It unwraps to the open's
// own error, so ErrNewerSchema and the like still match.
type copyOpenError struct {
	msg string
	err error
}

func (e *copyOpenError) Error() string { return e.msg }
func (e *copyOpenError) Unwrap() error { return e.err }

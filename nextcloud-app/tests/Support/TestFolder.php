<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Files\FileInfo;
use OCP\Files\Folder;
use OCP\Files\NotFoundException;
use OCP\Files\NotPermittedException;

class TestFolder extends TestNode implements Folder {
	public function getSize($includeMounts = true) {
		return 0;
	}

	public function getMimetype() {
		return 'httpd/unix-directory';
	}

	public function get($path) {
		$child = $this->child($path);
		if (!file_exists($this->fs->local($child))) {
			throw new NotFoundException($child);
		}
		return $this->fs->node($child);
	}

	public function getRelativePath($path) {
		$base = rtrim($this->path, '/');
		if ($path === $base) {
			return '/';
		}
		return str_starts_with($path, $base . '/') ? substr($path, strlen($base)) : null;
	}

	public function nodeExists($path) {
		return file_exists($this->fs->local($this->child($path)));
	}

	public function newFolder($path) {
		$child = $this->child($path);
		if (file_exists($this->fs->local($child)) || !mkdir($this->fs->local($child))) {
			throw new NotPermittedException('Could not create folder "' . $child . '"');
		}
		$this->fs->idOf($child);
		return new TestFolder($this->fs, $child);
	}

	/** Like Nextcloud's, it writes over an existing file; the code under test must not let it. */
	public function newFile($path, $content = null) {
		$child = $this->child($path);
		$out = fopen($this->fs->local($child), 'wb');
		if ($out === false) {
			throw new NotPermittedException('Could not create path "' . $child . '"');
		}
		try {
			if ($this->fs->writeFailure !== null) {
				// A storage that fails half way, leaving a partial file behind.
				fwrite($out, 'partial');
				throw $this->fs->writeFailure;
			}
			if (is_resource($content)) {
				stream_copy_to_stream($content, $out);
			} elseif ($content !== null) {
				fwrite($out, (string)$content);
			}
		} finally {
			fclose($out);
		}
		$this->fs->idOf($child);
		return new TestFile($this->fs, $child);
	}

	public function getById($id) {
		if ($this->fs->lookupFailure !== null) {
			throw $this->fs->lookupFailure;
		}
		$path = $this->fs->pathOf((int)$id);
		if ($path === null || !str_starts_with($path, rtrim($this->path, '/') . '/') || !file_exists($this->fs->local($path))) {
			return [];
		}
		return [$this->fs->node($path)];
	}

	public function getFreeSpace() {
		return $this->fs->freeSpace ?? FileInfo::SPACE_UNLIMITED;
	}

	private function child(string $path): string {
		if ($path === '' || str_contains($path, "\0") || in_array('..', explode('/', $path), true)) {
			throw new NotPermittedException('invalid path "' . $path . '"');
		}
		return rtrim($this->path, '/') . '/' . $path;
	}
}

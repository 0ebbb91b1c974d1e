<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Files\File;

final class TestFile extends TestNode implements File {
	private const MIME_TYPES = ['pdf' => 'application/pdf', 'txt' => 'text/plain', 'md' => 'text/markdown', 'png' => 'image/png', 'gz' => 'application/gzip'];

	public function getSize($includeMounts = true) {
		return $this->fs->reportedSizes[$this->path] ?? filesize($this->fs->local($this->path));
	}

	/** Also File::getMimeType(): PHP method names ignore case. */
	public function getMimetype() {
		return self::MIME_TYPES[strtolower(pathinfo($this->path, PATHINFO_EXTENSION))] ?? 'application/octet-stream';
	}

	public function getContent() {
		return (string)file_get_contents($this->fs->local($this->path));
	}

	public function fopen($mode) {
		$this->fs->opened[] = $this->path;
		return fopen($this->fs->local($this->path), $mode);
	}
}

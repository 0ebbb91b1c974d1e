<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Files\Node;

/**
 * A file or folder of TestFiles, addressed like Nextcloud's nodes ("/alice/files/a.pdf")
 * and stored in a real directory.
 */
abstract class TestNode implements Node {
	public function __construct(
		protected readonly TestFiles $fs,
		protected readonly string $path,
	) {
	}

	public function getName() {
		return basename($this->path);
	}

	public function getPath() {
		return $this->path;
	}

	public function getId() {
		return $this->fs->idOf($this->path);
	}

	/** The user whose files the path is in, or the owner TestFiles::$sharedIn names for it. */
	public function getOwner() {
		foreach ($this->fs->sharedIn as $prefix => $owner) {
			if ($this->path === $prefix || str_starts_with($this->path, rtrim($prefix, '/') . '/')) {
				return $this->fs->directory()->get($owner);
			}
		}
		$uid = explode('/', $this->path)[1] ?? '';
		return $uid === '' ? null : $this->fs->directory()->get($uid);
	}

	public function isReadable() {
		return !in_array($this->path, $this->fs->unreadable, true);
	}

	public function delete() {
		$this->fs->remove($this->path);
	}
}

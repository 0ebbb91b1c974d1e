<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Files\IRootFolder;

/**
 * TestFiles is Nextcloud's file tree over a real temporary directory: every user's files
 * live in <data>/<uid>/files as on a server, nodes have file ids, and a test can make
 * sizes lie, files unreadable, the storage full or writes fail.
 */
final class TestFiles extends TestFolder implements IRootFolder {
	/** @var array<string, int|float> path => size the file cache reports instead of the real one */
	public array $reportedSizes = [];
	/** @var list<string> paths that are not readable */
	public array $unreadable = [];
	/** @var list<string> paths opened for reading or writing, in order */
	public array $opened = [];
	public int|float|null $freeSpace = null;
	public ?\Throwable $writeFailure = null;
	/** Thrown by getById(), as a broken file cache would. */
	public ?\Throwable $lookupFailure = null;
	/**
	 * Folders that another user shared into a user's files, as Nextcloud mounts them:
	 * absolute path ("/alice/files/FromBob") => the owner's uid.
	 *
	 * @var array<string, string>
	 */
	public array $sharedIn = [];
	/** @var array<int, string> */
	private array $ids = [];
	private int $nextId = 100;

	public function __construct(
		private readonly string $dataDir,
		private readonly Directory $directory,
	) {
		parent::__construct($this, '');
		if (!is_dir($dataDir)) {
			mkdir($dataDir, 0700, true);
		}
	}

	public function getUserFolder($userId) {
		if ($this->directory->get($userId) === null) {
			throw new \RuntimeException('no user ' . $userId);
		}
		$path = '/' . $userId . '/files';
		if (!is_dir($this->local($path))) {
			mkdir($this->local($path), 0700, true);
		}
		return new TestFolder($this, $path);
	}

	/** Puts a file into a user's files, creating folders on the way; returns its file id. */
	public function put(string $uid, string $relativePath, string $content): int {
		$path = '/' . $uid . '/files/' . $relativePath;
		$local = $this->local($path);
		if (!is_dir(dirname($local))) {
			mkdir(dirname($local), 0700, true);
		}
		file_put_contents($local, $content);
		return $this->idOf($path);
	}

	/** Creates a folder in a user's files; returns its file id. */
	public function makeFolder(string $uid, string $relativePath): int {
		$path = '/' . $uid . '/files/' . $relativePath;
		mkdir($this->local($path), 0700, true);
		return $this->idOf($path);
	}

	/**
	 * Every file below a user's folder, relative to it, with its content.
	 *
	 * @return array<string, string>
	 */
	public function contents(string $uid, string $below = ''): array {
		$root = $this->local('/' . $uid . '/files' . ($below === '' ? '' : '/' . $below));
		if (!is_dir($root)) {
			return [];
		}
		$files = [];
		$iterator = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator($root, \FilesystemIterator::SKIP_DOTS));
		foreach ($iterator as $file) {
			if ($file->isFile()) {
				$files[substr($file->getPathname(), strlen($root) + 1)] = (string)file_get_contents($file->getPathname());
			}
		}
		ksort($files);
		return $files;
	}

	public function directory(): Directory {
		return $this->directory;
	}

	public function local(string $path): string {
		return $this->dataDir . $path;
	}

	public function idOf(string $path): int {
		$id = array_search($path, $this->ids, true);
		if ($id === false) {
			$id = $this->nextId++;
			$this->ids[$id] = $path;
		}
		return $id;
	}

	public function pathOf(int $id): ?string {
		return $this->ids[$id] ?? null;
	}

	public function node(string $path): TestNode {
		return is_dir($this->local($path)) ? new TestFolder($this, $path) : new TestFile($this, $path);
	}

	public function remove(string $path): void {
		self::removeLocal($this->local($path));
	}

	/** Deletes the whole data directory. */
	public function destroy(): void {
		self::removeLocal($this->dataDir);
	}

	private static function removeLocal(string $local): void {
		if (is_dir($local) && !is_link($local)) {
			foreach (scandir($local) ?: [] as $entry) {
				if ($entry !== '.' && $entry !== '..') {
					self::removeLocal($local . '/' . $entry);
				}
			}
			rmdir($local);
		} elseif (file_exists($local) || is_link($local)) {
			unlink($local);
		}
	}
}

<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\Files;

interface Folder extends Node {
	/** @return \OCP\Files\Node */
	public function get($path);

	/** @return bool */
	public function nodeExists($path);

	/** @return string|null the path below this folder, with a leading "/", or null outside it */
	public function getRelativePath($path);

	/** @return \OCP\Files\Folder */
	public function newFolder($path);

	/**
	 * @param string|resource|null $content
	 * @return \OCP\Files\File
	 */
	public function newFile($path, $content = null);

	/** @return \OCP\Files\Node[] */
	public function getById($id);

	/** @return int|float */
	public function getFreeSpace();
}

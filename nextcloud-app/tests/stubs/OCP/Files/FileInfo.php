<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\Files;

interface FileInfo {
	public const TYPE_FILE = 'file';
	public const TYPE_FOLDER = 'dir';
	public const SPACE_NOT_COMPUTED = -1;
	public const SPACE_UNKNOWN = -2;
	public const SPACE_UNLIMITED = -3;

	/** @return int|float */
	public function getSize($includeMounts = true);

	/** @return string */
	public function getName();

	/** @return string */
	public function getPath();

	/** @return string */
	public function getMimetype();

	/** @return bool */
	public function isReadable();

	/** @return int|null */
	public function getId();

	/** @return \OCP\IUser|null */
	public function getOwner();
}

<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of OCP (stable31), only what the app uses.
 */

namespace OCP\Share;

use OCP\Files\Node;

interface IManager {
	/** @return IShare */
	public function createShare(IShare $share);

	/** @return IShare[] */
	public function getSharesBy($userId, $shareType, $path = null, $reshares = false, $limit = 50, $offset = 0, bool $onlyValid = true);

	/** @return IShare */
	public function newShare();
}

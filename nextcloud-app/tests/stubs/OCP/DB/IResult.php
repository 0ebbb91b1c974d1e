<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\DB;

use PDO;

interface IResult {
	public function closeCursor(): bool;

	/** @return mixed a row, or false when there is none left */
	public function fetch(int $fetchMode = PDO::FETCH_ASSOC);

	public function fetchAll(int $fetchMode = PDO::FETCH_ASSOC): array;

	public function fetchOne();
}

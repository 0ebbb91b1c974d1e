<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\DB\IResult;
use PDO;

/** IResult over a PDO statement; like Doctrine, fetch() returns false past the last row. */
final class PdoResult implements IResult {
	public function __construct(
		private readonly \PDOStatement $statement,
	) {
	}

	public function closeCursor(): bool {
		return $this->statement->closeCursor();
	}

	public function fetch(int $fetchMode = PDO::FETCH_ASSOC) {
		return $this->statement->fetch($fetchMode);
	}

	public function fetchAll(int $fetchMode = PDO::FETCH_ASSOC): array {
		return $this->statement->fetchAll($fetchMode);
	}

	public function fetchOne() {
		return $this->statement->fetchColumn();
	}
}

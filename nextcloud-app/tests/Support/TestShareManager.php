<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\Share\Exceptions\AlreadySharedException;
use OCP\Share\Exceptions\GenericShareException;
use OCP\Share\IManager;
use OCP\Share\IShare;

/**
 * An in-memory share manager with the checks of Nextcloud's Share20\Manager that the app
 * relies on: an initiator and a node are required, the owner is the node's owner, a
 * recipient gets a path once, link sharing and enforced passwords follow the settings
 * below, and link passwords are stored hashed.
 */
final class TestShareManager implements IManager {
	/** @var array<string, IShare> by id */
	public array $shares = [];
	public bool $allowLinks = true;
	public bool $enforcePassword = false;
	private int $nextId = 1;

	public function newShare() {
		return new TestShare();
	}

	public function createShare(IShare $share) {
		if ($share->getSharedBy() === null || $share->getNode() === null) {
			throw new \InvalidArgumentException('Share initiator must be set');
		}
		$owner = $share->getNode()->getOwner();
		$share->setShareOwner($owner === null ? $share->getSharedBy() : $owner->getUID());
		if ($share->getShareType() === IShare::TYPE_LINK) {
			if (!$this->allowLinks) {
				throw new \Exception('Link sharing is not allowed');
			}
			if ($share->getSharedWith() !== null) {
				throw new \InvalidArgumentException('Share recipient should be empty');
			}
			if ($share->getPassword() === null && $this->enforcePassword) {
				throw new \InvalidArgumentException('Passwords are enforced for link and mail shares');
			}
			if ($share->getPassword() !== null) {
				if (strlen($share->getPassword()) < 8) {
					throw new \OCP\HintException('Password is too short', 'Password needs to be at least 8 characters long.');
				}
				$share->setPassword(password_hash($share->getPassword(), PASSWORD_DEFAULT));
			}
			$share->setToken(bin2hex(random_bytes(8)));
		} else {
			foreach ($this->shares as $existing) {
				if ($existing->getShareType() === $share->getShareType() && $existing->getSharedWith() === $share->getSharedWith()
					&& $existing->getNode()->getPath() === $share->getNode()->getPath()) {
					throw new AlreadySharedException('Path is already shared with ' . $share->getSharedWith(), $existing);
				}
			}
		}
		if ($share->getExpirationDate() !== null && $share->getExpirationDate() < new \DateTime('today')) {
			throw new GenericShareException('Expiration date is in the past');
		}
		if ($share->getShareType() === IShare::TYPE_USER && $share->getSharedWith() === $share->getShareOwner()) {
			throw new \InvalidArgumentException('Cannot share with the share owner');
		}
		$share->id = (string)$this->nextId++;
		$this->shares[$share->getId()] = $share;
		return $share;
	}

	public function getSharesBy($userId, $shareType, $path = null, $reshares = false, $limit = 50, $offset = 0, bool $onlyValid = true) {
		$out = [];
		foreach ($this->shares as $share) {
			if ($share->getSharedBy() === $userId && $share->getShareType() === $shareType
				&& ($path === null || $share->getNode()->getPath() === $path->getPath())) {
				$out[] = $share;
			}
		}
		return array_slice($out, $offset, $limit < 0 ? null : $limit);
	}
}
